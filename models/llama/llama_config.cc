#include "models/llama/llama_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::llama {
namespace {

std::string Field(std::string_view source, std::string_view key) {
  return std::string(source) + ": config field '" + std::string(key) + "'";
}

bool IsNull(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null();
}

// Reads a positive integer field if present (HF's default stays otherwise).
Status ReadPositive(const nlohmann::json& j, std::string_view source, const char* key,
                    int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return InvalidArgumentError(Field(source, key) + " = " + it->dump() +
                                " must be a positive integer");
  }
  *out = it->get<int64_t>();
  return Status::Ok();
}

Status ReadPositiveDouble(const nlohmann::json& j, std::string_view source, const char* key,
                          double* out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
    return InvalidArgumentError(Field(source, key) + " = " + it->dump() +
                                " must be a positive number");
  }
  *out = it->get<double>();
  return Status::Ok();
}

// A boolean field that must have the value Strata implements (or be absent).
Status RequireBool(const nlohmann::json& j, std::string_view source, const char* key, bool want) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) {
    return InvalidArgumentError(Field(source, key) + " = " + it->dump() + " must be a boolean");
  }
  if (it->get<bool>() != want) {
    return UnimplementedError(Field(source, key) + " = " + it->dump() + ": Strata implements " +
                              (want ? "true" : "false") + " only");
  }
  return Status::Ok();
}

// rope_scaling / rope_parameters: null, or the plain RoPE ({"rope_type": "default"}, which
// transformers >= 4.45 may write, with an optional rope_theta) - anything else is refused.
Status ReadRope(const nlohmann::json& j, std::string_view source, const char* key,
                double* rope_theta) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_object()) {
    const auto type = it->find("rope_type");
    bool plain = type != it->end() && *type == "default";
    for (const auto& [k, v] : it->items()) {
      if (k != "rope_type" && k != "rope_theta") plain = false;
    }
    if (plain) {
      if (it->contains("rope_theta")) {
        return ReadPositiveDouble(*it, source, "rope_theta", rope_theta)
            .WithContext(std::string("in '") + key + "'");
      }
      return Status::Ok();
    }
  }
  return UnimplementedError(Field(source, key) + " = " + it->dump() +
                            ": Strata implements plain RoPE only (null or "
                            "{\"rope_type\": \"default\"})");
}

}  // namespace

int64_t LlamaConfig::NumParameters() const {
  const int64_t h = hidden_size, kv = num_key_value_heads * head_dim();
  const int64_t attention = 2 * h * h + 2 * h * kv;  // q, o; k, v
  const int64_t mlp = 3 * h * intermediate_size;     // gate, up, down
  const int64_t layer = attention + mlp + 2 * h;     // + input and post-attention RMSNorm
  const int64_t embed = vocab_size * h;
  return embed + num_hidden_layers * layer + h + (tie_word_embeddings ? 0 : embed);
}

Result<LlamaConfig> ParseLlamaConfig(const nlohmann::json& j, std::string_view source) {
  if (!j.is_object()) {
    return InvalidArgumentError(std::string(source) + ": config is not a JSON object");
  }
  if (const auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != 1 || *it->begin() != "LlamaForCausalLM") {
      return UnimplementedError(Field(source, "architectures") + " = " + it->dump() +
                                ": Strata implements [\"LlamaForCausalLM\"] only");
    }
  }
  if (const auto it = j.find("model_type"); it != j.end() && *it != "llama") {
    return UnimplementedError(Field(source, "model_type") + " = " + it->dump() +
                              ": Strata implements \"llama\" only");
  }
  if (const auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    return UnimplementedError(Field(source, "hidden_act") + " = " + it->dump() +
                              ": Strata implements \"silu\" only");
  }
  STRATA_RETURN_IF_ERROR(RequireBool(j, source, "attention_bias", false));
  STRATA_RETURN_IF_ERROR(RequireBool(j, source, "mlp_bias", false));
  if (const auto it = j.find("attention_dropout");
      it != j.end() && !(it->is_number() && it->get<double>() == 0.0)) {
    return UnimplementedError(Field(source, "attention_dropout") + " = " + it->dump() +
                              ": Strata implements 0.0 only");
  }
  if (const auto it = j.find("pretraining_tp"); it != j.end() && !it->is_number_integer()) {
    return InvalidArgumentError(Field(source, "pretraining_tp") + " = " + it->dump() +
                                " must be an integer");
  }

  LlamaConfig c;  // transformers' LlamaConfig defaults
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "vocab_size", &c.vocab_size));
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "hidden_size", &c.hidden_size));
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "intermediate_size", &c.intermediate_size));
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "num_hidden_layers", &c.num_hidden_layers));
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "num_attention_heads", &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "num_key_value_heads", &c.num_key_value_heads));
  STRATA_RETURN_IF_ERROR(
      ReadPositive(j, source, "max_position_embeddings", &c.max_position_embeddings));
  STRATA_RETURN_IF_ERROR(ReadPositiveDouble(j, source, "rms_norm_eps", &c.rms_norm_eps));
  STRATA_RETURN_IF_ERROR(ReadPositiveDouble(j, source, "rope_theta", &c.rope_theta));
  STRATA_RETURN_IF_ERROR(ReadRope(j, source, "rope_scaling", &c.rope_theta));
  STRATA_RETURN_IF_ERROR(ReadRope(j, source, "rope_parameters", &c.rope_theta));
  if (const auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidArgumentError(Field(source, "tie_word_embeddings") + " = " + it->dump() +
                                  " must be a boolean");
    }
    c.tie_word_embeddings = it->get<bool>();
  }
  // transformers >= 4.56 writes "dtype"; earlier versions "torch_dtype".
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const std::string v = it->is_string() ? it->get<std::string>() : it->dump();
    if (v == "float32") {
      c.torch_dtype = DType::kFloat32;
    } else if (v == "float16") {
      c.torch_dtype = DType::kFloat16;
    } else if (v == "bfloat16") {
      c.torch_dtype = DType::kBFloat16;
    } else {
      return UnimplementedError(Field(source, key) + " = " + it->dump() +
                                ": Strata implements float32, float16 and bfloat16");
    }
    break;
  }

  if (c.hidden_size % c.num_attention_heads != 0) {
    return InvalidArgumentError(Field(source, "num_attention_heads") + " = " +
                                std::to_string(c.num_attention_heads) +
                                " does not divide hidden_size = " + std::to_string(c.hidden_size));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgumentError(
        Field(source, "num_key_value_heads") + " = " + std::to_string(c.num_key_value_heads) +
        " does not divide num_attention_heads = " + std::to_string(c.num_attention_heads));
  }
  if (!IsNull(j, "head_dim")) {
    const auto& hd = j["head_dim"];
    if (!hd.is_number_integer() || hd.get<int64_t>() != c.head_dim()) {
      return UnimplementedError(Field(source, "head_dim") + " = " + hd.dump() +
                                ": Strata implements head_dim = hidden_size / "
                                "num_attention_heads = " +
                                std::to_string(c.head_dim()) + " only");
    }
  }
  if (c.head_dim() % 2 != 0) {
    return InvalidArgumentError(std::string(source) + ": head_dim " + std::to_string(c.head_dim()) +
                                " is odd; RoPE needs pairs");
  }
  return c;
}

Result<LlamaConfig> ReadLlamaConfig(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not valid JSON");
  return ParseLlamaConfig(j, path);
}

nlohmann::json LlamaConfigJson(const LlamaConfig& c) {
  const std::string_view dtype = c.torch_dtype == DType::kFloat32   ? "float32"
                                 : c.torch_dtype == DType::kFloat16 ? "float16"
                                                                    : "bfloat16";
  return {
      {"architectures", nlohmann::json::array({"LlamaForCausalLM"})},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"head_dim", c.head_dim()},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"mlp_bias", false},
      {"model_type", "llama"},
      {"num_attention_heads", c.num_attention_heads},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_key_value_heads", c.num_key_value_heads},
      {"pretraining_tp", 1},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", dtype},
      {"transformers_version", "4.46.3"},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
}

// Also "3b" (Llama 3.2 3B), "llama-70b" (Llama 2 70B) and "llama3-70b" (Llama 3 70B), for
// `strata estimate` and docs/infinity.md's memory table.
Result<LlamaConfig> LlamaPreset(std::string_view name) {
  LlamaConfig c;
  c.tie_word_embeddings = false;
  c.rope_theta = 10000.0;
  if (name == "tiny") {  // ~0.85M parameters, byte-level, GQA (4 query heads share 2 KV heads)
    c.vocab_size = 256;
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = DType::kFloat32;
  } else if (name == "small") {  // ~19M parameters, byte-level, GQA
    c.vocab_size = 256;
    c.hidden_size = 512;
    c.intermediate_size = 1536;
    c.num_hidden_layers = 6;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.max_position_embeddings = 1024;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = DType::kFloat32;
  } else if (name == "1b") {  // TinyLlama-1.1B (TinyLlama/TinyLlama-1.1B-Chat-v1.0)
    c.vocab_size = 32000;
    c.hidden_size = 2048;
    c.intermediate_size = 5632;
    c.num_hidden_layers = 22;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.max_position_embeddings = 2048;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = DType::kBFloat16;
  } else if (name == "7b") {  // Llama 2 7B (meta-llama/Llama-2-7b-hf)
    c.vocab_size = 32000;
    c.hidden_size = 4096;
    c.intermediate_size = 11008;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 32;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = DType::kFloat16;
  } else if (name == "3b") {  // Llama 3.2 3B's shape (meta-llama/Llama-3.2-3B; no rope scaling)
    c.vocab_size = 128256;
    c.hidden_size = 3072;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 24;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 131072;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.tie_word_embeddings = true;
    c.torch_dtype = DType::kBFloat16;
  } else if (name == "llama-70b") {  // Llama 2 70B (meta-llama/Llama-2-70b-hf)
    c.vocab_size = 32000;
    c.hidden_size = 8192;
    c.intermediate_size = 28672;
    c.num_hidden_layers = 80;
    c.num_attention_heads = 64;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-5;
    c.torch_dtype = DType::kFloat16;
  } else if (name == "llama3-70b") {  // Llama 3 70B (meta-llama/Meta-Llama-3-70B)
    c.vocab_size = 128256;
    c.hidden_size = 8192;
    c.intermediate_size = 28672;
    c.num_hidden_layers = 80;
    c.num_attention_heads = 64;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 8192;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.torch_dtype = DType::kBFloat16;
  } else {
    return InvalidArgumentError("unknown Llama preset '" + std::string(name) +
                                "'; presets: tiny, small, 1b, 7b, 3b, llama-70b, llama3-70b");
  }
  return c;
}

}  // namespace strata::llama
