// LlamaConfig: the Hugging Face `config.json` fields of a Llama-family model that Strata
// implements, read with the field named in every error, and the random-init presets.
//
// Families (config.json's `architectures` / `model_type`): LlamaForCausalLM ("llama") and
// MistralForCausalLM ("mistral": Llama's layers and tensor names, attention limited to a sliding
// window), Qwen2ForCausalLM / Qwen3ForCausalLM (qwen_config.h: q/k/v biases; q/k norms and an
// explicit head_dim). ReadLlamaConfig refuses what the model does not implement (other
// architectures, RoPE types other than default / linear / dynamic / llama3, attention/MLP bias,
// non-SiLU activations) naming the field and its value, rather than computing something else
// silently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "models/llama/config/llama_rope.h"

namespace strata::llama {

// The architecture a config.json names (one row per family in llama_config.cc's table).
enum class LlamaFamily { kLlama, kMistral, kQwen2, kQwen3 };

struct LlamaConfig {
  LlamaFamily family = LlamaFamily::kLlama;
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // defaults to num_attention_heads when absent
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // rope_scaling / rope_parameters (llama_rope.h)
  // MistralForCausalLM: query i attends keys j with i - j < sliding_window (transformers'
  // sliding-window mask); 0: no window (config null, and every Llama).
  int64_t sliding_window = 0;
  bool tie_word_embeddings = false;
  DType torch_dtype = DType::kFloat32;  // the checkpoint's storage dtype
  // config.json's head_dim when it is set (Qwen3: 128 at hidden 1024 / 16 heads); 0: hidden_size /
  // num_attention_heads. q_proj is [heads * head_dim, hidden], o_proj [hidden, heads * head_dim].
  int64_t explicit_head_dim = 0;

  // Qwen switches (models/llama/config/qwen_config.h). qkv_bias: q_proj, k_proj, v_proj carry
  // biases (Qwen2); qk_norm: q_norm / k_norm, an RMSNorm over head_dim applied to each head of q
  // and k before RoPE (Qwen3).
  bool qkv_bias = false;
  bool qk_norm = false;

  // From `family`: 2 = Qwen2ForCausalLM (Qwen2 / Qwen2.5), 3 = Qwen3ForCausalLM, 0 = not Qwen.
  int qwen_version() const {
    return family == LlamaFamily::kQwen2 ? 2 : family == LlamaFamily::kQwen3 ? 3 : 0;
  }
  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads;
  }
  // Number of parameters (embedding, layers, final norm, LM head unless tied).
  int64_t NumParameters() const;
};

// Ok when a sequence of `length` positions can run: up to max_position_embeddings, or any length
// with rope_scaling "dynamic" (its frequencies follow the length, llama_rope.h). Otherwise
// InvalidArgument: `what` (e.g. "--seq-len 4096"), then the limit and the RoPE type named.
Status CheckSequenceLength(const LlamaConfig& c, int64_t length, std::string_view what);

// Parses a config.json object. `source` (a file path) prefixes every error.
Result<LlamaConfig> ParseLlamaConfig(const nlohmann::json& j, std::string_view source);
// Reads <dir>/config.json.
Result<LlamaConfig> ReadLlamaConfig(const std::string& model_dir);
// The config.json object for `config` (as transformers writes it: architectures, model_type...).
nlohmann::json LlamaConfigJson(const LlamaConfig& config);

// Presets for estimates and random initialisation, with the real models' shapes (and RoPE
// settings): "tiny" (~1M params), "small" (~20M), "1b" (TinyLlama-1.1B's shape), "7b" (Llama 2
// 7B's), "llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "mistral-7b" (Mistral-7B-v0.1),
// and the Qwen presets (qwen_config.h: qwen2.5-0.5b, qwen3-0.6b, qwen3-4b). See the
// table in llama_config.cc. InvalidArgument naming every preset otherwise.
Result<LlamaConfig> LlamaPreset(std::string_view name);
// The preset names, in the table's order, comma-separated.
std::string LlamaPresetNames();

}  // namespace strata::llama
