// LlamaConfig: the Hugging Face `config.json` fields of a Llama-family model that Strata
// implements, read with the field named in every error, and the random-init presets.
//
// ReadLlamaConfig refuses what the model does not implement (other architectures, rope_scaling,
// attention/MLP bias, non-SiLU activations) naming the field, rather than computing something
// else silently. Qwen2 / Qwen3 configs are read too (qwen_config.h: their switches below).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::llama {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // defaults to num_attention_heads when absent
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  DType torch_dtype = DType::kFloat32;  // the checkpoint's storage dtype
  // config.json's head_dim when it is set (Qwen3: 128 at hidden 1024 / 16 heads); 0: hidden_size /
  // num_attention_heads. q_proj is [heads * head_dim, hidden], o_proj [hidden, heads * head_dim].
  int64_t explicit_head_dim = 0;

  // Qwen families (models/llama/qwen_config.h): 2 = Qwen2ForCausalLM (Qwen2 / Qwen2.5), 3 =
  // Qwen3ForCausalLM, 0 = not Qwen. qkv_bias: q_proj, k_proj, v_proj carry biases (Qwen2);
  // qk_norm: q_norm / k_norm, an RMSNorm over head_dim applied to each head of q and k before
  // RoPE (Qwen3).
  int qwen_version = 0;
  bool qkv_bias = false;
  bool qk_norm = false;

  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads;
  }
  // Number of parameters (embedding, layers, final norm, LM head unless tied).
  int64_t NumParameters() const;
};

// Parses a config.json object. `source` (a file path) prefixes every error.
Result<LlamaConfig> ParseLlamaConfig(const nlohmann::json& j, std::string_view source);
// Reads <dir>/config.json.
Result<LlamaConfig> ReadLlamaConfig(const std::string& model_dir);
// The config.json object for `config` (as transformers writes it: architectures, model_type...).
nlohmann::json LlamaConfigJson(const LlamaConfig& config);

// Presets for random initialisation: "tiny" (~1M params), "small" (~20M), "1b" (TinyLlama-1.1B's
// shape), "7b" (Llama 2 7B's), and the Qwen presets (qwen_config.h: qwen2.5-0.5b, qwen3-0.6b,
// qwen3-4b). InvalidArgument naming the allowed presets otherwise.
Result<LlamaConfig> LlamaPreset(std::string_view name);

}  // namespace strata::llama
