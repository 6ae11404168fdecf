#include "models/llama/config/qwen_config.h"

#include <string>

namespace strata::llama {
namespace {

std::string QwenField(std::string_view source, std::string_view key) {
  return std::string(source) + ": config field '" + std::string(key) + "'";
}

int VersionOfName(const std::string& s) {
  if (s == "Qwen2ForCausalLM" || s == "qwen2") return 2;
  if (s == "Qwen3ForCausalLM" || s == "qwen3") return 3;
  return 0;
}

}  // namespace

int QwenVersionOf(const nlohmann::json& j) {
  if (!j.is_object()) return 0;
  if (const auto a = j.find("architectures");
      a != j.end() && a->is_array() && a->size() == 1 && a->begin()->is_string()) {
    return VersionOfName(a->begin()->get<std::string>());
  }
  if (const auto t = j.find("model_type"); t != j.end() && t->is_string()) {
    return VersionOfName(t->get<std::string>());
  }
  return 0;
}

Status ParseQwenFields(const nlohmann::json& j, std::string_view source, LlamaConfig* c) {
  const int version = QwenVersionOf(j);
  if (version == 0) {
    return InvalidArgumentError(std::string(source) + ": not a Qwen2 / Qwen3 config");
  }
  // architectures (one entry) and model_type must name the same family.
  if (const auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
    if (!a->is_array() || a->size() != 1 || !a->begin()->is_string() ||
        VersionOfName(a->begin()->get<std::string>()) != version) {
      return UnimplementedError(QwenField(source, "architectures") + " = " + a->dump() +
                                ": Strata implements [\"Qwen" + std::to_string(version) +
                                "ForCausalLM\"] for model_type \"qwen" + std::to_string(version) +
                                "\"");
    }
  }
  if (const auto t = j.find("model_type"); t != j.end()) {
    const int named = t->is_string() ? VersionOfName(t->get<std::string>()) : 0;
    if (named != version) {
      return InvalidArgumentError(QwenField(source, "model_type") + " = " + t->dump() +
                                  " does not match architectures (expected \"qwen" +
                                  std::to_string(version) + "\")");
    }
  }
  // Sliding-window attention: Strata computes full causal attention only. sliding_window and
  // max_window_layers only matter when use_sliding_window is true (transformers ignores them
  // otherwise), so their values are accepted as they ship.
  if (const auto it = j.find("use_sliding_window"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidArgumentError(QwenField(source, "use_sliding_window") + " = " + it->dump() +
                                  " must be a boolean");
    }
    if (it->get<bool>()) {
      return UnimplementedError(QwenField(source, "use_sliding_window") + " = " + it->dump() +
                                ": Strata implements full causal attention only (false)");
    }
  }
  if (const auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    bool full = it->is_array();
    if (full) {
      for (const auto& t : *it) full = full && t == "full_attention";
    }
    if (!full) {
      return UnimplementedError(QwenField(source, "layer_types") + " = " + it->dump() +
                                ": Strata implements \"full_attention\" layers only");
    }
  }
  if (const auto it = j.find("use_mrope"); it != j.end() && !it->is_null() && *it != false) {
    return UnimplementedError(QwenField(source, "use_mrope") + " = " + it->dump() +
                              ": Strata implements false only");
  }
  c->family = version == 3 ? LlamaFamily::kQwen3 : LlamaFamily::kQwen2;
  if (version == 2) {
    c->qkv_bias = true;  // Qwen2Attention: q, k, v with bias, o_proj without
  } else {
    c->qk_norm = true;
    // transformers' Qwen3Config defaults head_dim to 128 (the shipped configs all write it).
    const auto hd = j.find("head_dim");
    if (hd == j.end() || hd->is_null()) c->explicit_head_dim = 128;
  }
  return Status::Ok();
}

void ApplyQwenConfigJson(const LlamaConfig& c, nlohmann::json* j) {
  if (c.qwen_version() == 0) return;
  nlohmann::json& o = *j;
  const bool v3 = c.qwen_version() == 3;
  o["architectures"] = nlohmann::json::array({v3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"});
  o["model_type"] = v3 ? "qwen3" : "qwen2";
  o.erase("mlp_bias");
  o.erase("pretraining_tp");
  if (v3) {
    o["attention_bias"] = false;
    o["sliding_window"] = nullptr;
  } else {
    o.erase("attention_bias");  // Qwen2Config has none: q/k/v always carry biases
    o.erase("head_dim");
    o["sliding_window"] = c.max_position_embeddings;
  }
  o["use_sliding_window"] = false;
  o["max_window_layers"] = c.num_hidden_layers;
  o["bos_token_id"] = 151643;
  o["eos_token_id"] = v3 ? 151645 : 151643;
}

Result<LlamaConfig> QwenPreset(std::string_view name) {
  LlamaConfig c;
  c.vocab_size = 151936;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = true;
  c.torch_dtype = DType::kBFloat16;
  if (name == "qwen2.5-0.5b") {  // Qwen/Qwen2.5-0.5B
    c.hidden_size = 896;
    c.intermediate_size = 4864;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 14;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 32768;
    c.family = LlamaFamily::kQwen2;
    c.qkv_bias = true;
  } else if (name == "qwen3-0.6b") {  // Qwen/Qwen3-0.6B
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 8;
    c.explicit_head_dim = 128;
    c.max_position_embeddings = 40960;
    c.family = LlamaFamily::kQwen3;
    c.qk_norm = true;
  } else if (name == "qwen3-4b") {  // Qwen/Qwen3-4B
    c.hidden_size = 2560;
    c.intermediate_size = 9728;
    c.num_hidden_layers = 36;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.explicit_head_dim = 128;
    c.max_position_embeddings = 40960;
    c.family = LlamaFamily::kQwen3;
    c.qk_norm = true;
  } else {
    return NotFoundError("no Qwen preset '" + std::string(name) + "'");
  }
  return c;
}

}  // namespace strata::llama
