// Qwen2 / Qwen2.5 (Qwen2ForCausalLM) and Qwen3 (Qwen3ForCausalLM) as switches on the Llama
// model (models/llama/config/llama_config.h): Qwen2 adds biases to q_proj, k_proj and v_proj; Qwen3
// adds q_norm / k_norm (an RMSNorm over head_dim on every head of q and k, before RoPE) and an
// explicit head_dim. Everything else (RMSNorm, SwiGLU MLP, RoPE, GQA, tied embeddings) is Llama's.
//
// ParseLlamaConfig calls these for a config whose architectures / model_type names a Qwen
// family; refused fields are named with their value (use_sliding_window true, layer_types other
// than full attention; attention_bias true is refused by the common code).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/llama/config/llama_config.h"

namespace strata::llama {

// 2 for Qwen2ForCausalLM / "qwen2", 3 for Qwen3ForCausalLM / "qwen3", 0 otherwise (from
// architectures[0] when present, else model_type).
int QwenVersionOf(const nlohmann::json& j);

// Reads the Qwen-only fields of config.json into `c` (whose common Llama fields are read) and
// sets its family switches. `source` prefixes every error.
Status ParseQwenFields(const nlohmann::json& j, std::string_view source, LlamaConfig* c);

// Turns the Llama config.json object `j` made for `c` into the Qwen family's (architectures,
// model_type and the fields transformers' Qwen2Config / Qwen3Config write).
void ApplyQwenConfigJson(const LlamaConfig& c, nlohmann::json* j);

// The Qwen presets (real shapes): "qwen2.5-0.5b", "qwen3-0.6b", "qwen3-4b". NotFound otherwise.
inline constexpr std::string_view kQwenPresetNames = "qwen2.5-0.5b, qwen3-0.6b, qwen3-4b";
Result<LlamaConfig> QwenPreset(std::string_view name);

}  // namespace strata::llama
