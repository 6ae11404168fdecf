#include "models/llama/config/llama_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/llama/config/qwen_config.h"

namespace strata::llama {
namespace {

std::string Field(std::string_view source, std::string_view key) {
  return std::string(source) + ": config field '" + std::string(key) + "'";
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

// rope_scaling, then rope_parameters (transformers >= 5): each null or an object
// (llama_rope.h); when both are set they must say the same.
Status ReadRope(const nlohmann::json& j, std::string_view source, LlamaConfig* c) {
  bool seen = false;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    RopeScaling s;
    STRATA_RETURN_IF_ERROR(ParseRopeScaling(*it, source, key, &s, &c->rope_theta));
    if (seen && !(s == c->rope_scaling)) {
      return InvalidArgumentError(Field(source, key) + " = " + it->dump() +
                                  " disagrees with 'rope_scaling' = " + j["rope_scaling"].dump());
    }
    c->rope_scaling = s;
    seen = true;
  }
  return Status::Ok();
}

// One row per family: config.json's architectures[0] and model_type.
struct Architecture {
  const char* name;
  const char* model_type;
  LlamaFamily family;
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", LlamaFamily::kLlama},
    {"MistralForCausalLM", "mistral", LlamaFamily::kMistral},
    {"Qwen2ForCausalLM", "qwen2", LlamaFamily::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", LlamaFamily::kQwen3},
};

const Architecture& ArchitectureOf(LlamaFamily family) {
  for (const Architecture& a : kArchitectures) {
    if (a.family == family) return a;
  }
  return kArchitectures[0];
}

// "[\"LlamaForCausalLM\"], [\"MistralForCausalLM\"]" or "\"llama\", \"mistral\"".
std::string ArchitectureNames(bool model_types) {
  std::string out;
  for (const Architecture& a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out +=
        model_types ? nlohmann::json(a.model_type).dump() : nlohmann::json::array({a.name}).dump();
  }
  return out;
}

// architectures (a one-element list) and model_type, each optional, naming one family together.
Status ReadFamily(const nlohmann::json& j, std::string_view source, LlamaFamily* family) {
  const Architecture* by_name = nullptr;
  if (const auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    for (const Architecture& a : kArchitectures) {
      if (it->is_array() && it->size() == 1 && *it->begin() == a.name) by_name = &a;
    }
    if (by_name == nullptr) {
      return UnimplementedError(Field(source, "architectures") + " = " + it->dump() +
                                ": Strata implements " + ArchitectureNames(false));
    }
  }
  const Architecture* by_type = nullptr;
  if (const auto it = j.find("model_type"); it != j.end()) {
    for (const Architecture& a : kArchitectures) {
      if (*it == a.model_type) by_type = &a;
    }
    if (by_type == nullptr) {
      return UnimplementedError(Field(source, "model_type") + " = " + it->dump() +
                                ": Strata implements " + ArchitectureNames(true));
    }
    if (by_name != nullptr && by_name != by_type) {
      return InvalidArgumentError(Field(source, "model_type") + " = " + it->dump() +
                                  " disagrees with 'architectures' = " + j["architectures"].dump() +
                                  " (model_type \"" + by_name->model_type + "\")");
    }
  }
  *family = by_name != nullptr   ? by_name->family
            : by_type != nullptr ? by_type->family
                                 : LlamaFamily::kLlama;
  return Status::Ok();
}

// Mistral's sliding_window: null (no window) or a positive integer. Other families do not read
// it (transformers' LlamaForCausalLM ignores the field too).
Status ReadSlidingWindow(const nlohmann::json& j, std::string_view source, LlamaConfig* c) {
  if (c->family != LlamaFamily::kMistral) return Status::Ok();
  const auto it = j.find("sliding_window");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
    return InvalidArgumentError(Field(source, "sliding_window") + " = " + it->dump() +
                                " must be null or a positive integer");
  }
  c->sliding_window = it->get<int64_t>();
  return Status::Ok();
}

}  // namespace

int64_t LlamaConfig::NumParameters() const {
  const int64_t h = hidden_size, kv = num_key_value_heads * head_dim();
  const int64_t q = num_attention_heads * head_dim();
  int64_t attention = 2 * h * q + 2 * h * kv;     // q, o; k, v
  if (qkv_bias) attention += q + 2 * kv;          // Qwen2: q, k, v biases
  if (qk_norm) attention += 2 * head_dim();       // Qwen3: q_norm, k_norm
  const int64_t mlp = 3 * h * intermediate_size;  // gate, up, down
  const int64_t layer = attention + mlp + 2 * h;  // + input and post-attention RMSNorm
  const int64_t embed = vocab_size * h;
  return embed + num_hidden_layers * layer + h + (tie_word_embeddings ? 0 : embed);
}

Result<LlamaConfig> ParseLlamaConfig(const nlohmann::json& j, std::string_view source) {
  if (!j.is_object()) {
    return InvalidArgumentError(std::string(source) + ": config is not a JSON object");
  }
  LlamaConfig c;  // transformers' LlamaConfig defaults
  STRATA_RETURN_IF_ERROR(ReadFamily(j, source, &c.family));
  const int qwen = c.family == LlamaFamily::kQwen2 ? 2 : c.family == LlamaFamily::kQwen3 ? 3 : 0;
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
  STRATA_RETURN_IF_ERROR(ReadRope(j, source, &c));
  STRATA_RETURN_IF_ERROR(ReadSlidingWindow(j, source, &c));
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

  STRATA_RETURN_IF_ERROR(ReadPositive(j, source, "head_dim", &c.explicit_head_dim));
  if (qwen != 0) STRATA_RETURN_IF_ERROR(ParseQwenFields(j, source, &c));
  if (c.explicit_head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    return InvalidArgumentError(Field(source, "num_attention_heads") + " = " +
                                std::to_string(c.num_attention_heads) +
                                " does not divide hidden_size = " + std::to_string(c.hidden_size));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgumentError(
        Field(source, "num_key_value_heads") + " = " + std::to_string(c.num_key_value_heads) +
        " does not divide num_attention_heads = " + std::to_string(c.num_attention_heads));
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

Status CheckSequenceLength(const LlamaConfig& c, int64_t length, std::string_view what) {
  if (length <= c.max_position_embeddings || c.rope_scaling.type == RopeType::kDynamic) {
    return Status::Ok();
  }
  return InvalidArgumentError(std::string(what) + " exceeds the model's max_position_embeddings " +
                              std::to_string(c.max_position_embeddings) +
                              " (only rope_scaling.rope_type \"dynamic\" goes past it; this "
                              "model's rope_type is \"" +
                              std::string(RopeTypeName(c.rope_scaling.type)) + "\")");
}

nlohmann::json LlamaConfigJson(const LlamaConfig& c) {
  const std::string_view dtype = c.torch_dtype == DType::kFloat32   ? "float32"
                                 : c.torch_dtype == DType::kFloat16 ? "float16"
                                                                    : "bfloat16";
  const Architecture& arch = ArchitectureOf(c.family);
  nlohmann::json j = {
      {"architectures", nlohmann::json::array({arch.name})},
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
      {"model_type", arch.model_type},
      {"num_attention_heads", c.num_attention_heads},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_key_value_heads", c.num_key_value_heads},
      {"pretraining_tp", 1},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", RopeScalingJson(c.rope_scaling)},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", dtype},
      {"transformers_version", "4.46.3"},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
  if (c.family == LlamaFamily::kMistral) {  // MistralConfig's fields
    for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp"}) j.erase(key);
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  }
  ApplyQwenConfigJson(c, &j);  // Qwen2 / Qwen3: their architectures and fields (qwen_config.h)
  return j;
}

namespace {

// --- Presets: one function and one table row each --------------------------------------------

LlamaConfig Tiny() {  // ~0.85M parameters, byte-level, GQA (4 query heads share 2 KV heads)
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 128;
  c.intermediate_size = 384;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = DType::kFloat32;
  return c;
}

LlamaConfig Small() {  // ~19M parameters, byte-level, GQA
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = DType::kFloat32;
  return c;
}

LlamaConfig TinyLlama1B() {  // TinyLlama/TinyLlama-1.1B-Chat-v1.0
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.num_hidden_layers = 22;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 4;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = DType::kBFloat16;
  return c;
}

LlamaConfig Llama2_7B() {  // meta-llama/Llama-2-7b-hf
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 11008;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 32;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = DType::kFloat16;
  return c;
}

// Llama 3.1 / 3.2: vocabulary 128,256, 8 KV heads, theta 500,000, 128K context by llama3 RoPE
// scaling of the 8,192-token pre-training context.
LlamaConfig Llama3(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                   double rope_factor, bool tied) {
  LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = rope_factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = tied;
  c.torch_dtype = DType::kBFloat16;
  return c;
}
LlamaConfig Llama32_1B() { return Llama3(2048, 8192, 16, 32, 32.0, true); }   // 1.24B
LlamaConfig Llama32_3B() { return Llama3(3072, 8192, 28, 24, 32.0, true); }   // 3.21B
LlamaConfig Llama31_8B() { return Llama3(4096, 14336, 32, 32, 8.0, false); }  // 8.03B

LlamaConfig Mistral7B() {  // mistralai/Mistral-7B-v0.1: 7.24B, sliding window 4096
  LlamaConfig c;
  c.family = LlamaFamily::kMistral;
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.sliding_window = 4096;
  c.torch_dtype = DType::kBFloat16;
  return c;
}

LlamaConfig Llama70B(int64_t vocab, double theta, int64_t max_pos, DType dtype) {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_hidden_layers = 80;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = theta;
  c.torch_dtype = dtype;
  return c;
}
// meta-llama/Llama-2-70b-hf: 68.98B
LlamaConfig Llama2_70B() { return Llama70B(32000, 10000.0, 4096, DType::kFloat16); }
// meta-llama/Meta-Llama-3-70B: 70.55B
LlamaConfig Llama3_70B() { return Llama70B(128256, 500000.0, 8192, DType::kBFloat16); }

struct Preset {
  const char* name;
  LlamaConfig (*make)();
};
constexpr Preset kPresets[] = {
    {"tiny", Tiny},
    {"small", Small},
    {"1b", TinyLlama1B},
    {"7b", Llama2_7B},
    {"llama3.2-1b", Llama32_1B},
    {"llama3.2-3b", Llama32_3B},
    {"llama3.1-8b", Llama31_8B},
    {"mistral-7b", Mistral7B},
    {"3b", Llama32_3B},  // for estimates and docs/infinity.md's table: Llama 3.2 3B's shape
    {"llama-70b", Llama2_70B},
    {"llama3-70b", Llama3_70B},
};

}  // namespace

std::string LlamaPresetNames() {
  std::string out;
  for (const Preset& p : kPresets) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out + ", " + std::string(kQwenPresetNames);
}

Result<LlamaConfig> LlamaPreset(std::string_view name) {
  if (Result<LlamaConfig> qwen = QwenPreset(name); qwen.ok()) return qwen;  // qwen_config.h
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
  }
  return InvalidArgumentError("unknown Llama preset '" + std::string(name) +
                              "'; presets: " + LlamaPresetNames());
}

}  // namespace strata::llama
