#include "models/llama/config/llama_rope.h"

#include <cmath>
#include <numbers>
#include <string>

namespace strata::llama {
namespace {

struct TypeInfo {
  RopeType type;
  const char* name;
  // The keys this type reads besides rope_type / type and rope_theta; `required` are needed.
  std::vector<const char*> required, optional;
};

const std::vector<TypeInfo>& Types() {
  static const std::vector<TypeInfo> kTypes = {
      {RopeType::kDefault, "default", {}, {}},
      {RopeType::kLinear, "linear", {"factor"}, {}},
      {RopeType::kDynamic, "dynamic", {"factor"}, {"original_max_position_embeddings"}},
      {RopeType::kLlama3,
       "llama3",
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
       {}},
  };
  return kTypes;
}

bool Contains(const std::vector<const char*>& keys, std::string_view k) {
  for (const char* key : keys) {
    if (k == key) return true;
  }
  return false;
}

// A finite number >= `min` (> `min` when `strict`).
Status ReadNumber(const nlohmann::json& v, const std::string& field, double min, bool strict,
                  double* out) {
  const bool ok = v.is_number() && std::isfinite(v.get<double>()) &&
                  (strict ? v.get<double>() > min : v.get<double>() >= min);
  if (!ok) {
    return InvalidArgumentError(field + " = " + v.dump() + " must be a number " +
                                (strict ? "> " : ">= ") + nlohmann::json(min).dump());
  }
  *out = v.get<double>();
  return Status::Ok();
}

}  // namespace

std::string_view RopeTypeName(RopeType type) {
  for (const TypeInfo& t : Types()) {
    if (t.type == type) return t.name;
  }
  return "?";
}

Status ParseRopeScaling(const nlohmann::json& value, std::string_view source, std::string_view key,
                        RopeScaling* out, double* rope_theta) {
  *out = RopeScaling{};
  const std::string field = std::string(source) + ": config field '" + std::string(key);
  if (value.is_null()) return Status::Ok();
  if (!value.is_object()) {
    return InvalidArgumentError(field + "' = " + value.dump() + " must be an object or null");
  }
  // transformers' "rope_type"; older configs spell it "type".
  const char* type_key = value.contains("rope_type") ? "rope_type" : "type";
  const auto type_it = value.find(type_key);
  if (type_it == value.end() || !type_it->is_string()) {
    return InvalidArgumentError(field + "." + type_key +
                                "' = " + (type_it == value.end() ? "(absent)" : type_it->dump()) +
                                " must name the RoPE type (default, linear, dynamic, llama3)");
  }
  const TypeInfo* info = nullptr;
  for (const TypeInfo& t : Types()) {
    if (*type_it == t.name) info = &t;
  }
  if (info == nullptr) {
    return UnimplementedError(field + "." + type_key + "' = " + type_it->dump() +
                              ": Strata implements the RoPE types default, linear, dynamic and "
                              "llama3");
  }
  out->type = info->type;
  for (const char* k : info->required) {
    if (!value.contains(k) || value[k].is_null()) {
      return InvalidArgumentError(field + "." + k + "' is required for rope_type \"" + info->name +
                                  "\"");
    }
  }
  for (const auto& [k, v] : value.items()) {
    const std::string f = field + "." + k + "'";
    if (k == "rope_type" || k == "type") {
      if (k != type_key && v != *type_it) {
        return InvalidArgumentError(f + " = " + v.dump() + " disagrees with '" + type_key +
                                    "' = " + type_it->dump());
      }
    } else if (k == "rope_theta") {
      STRATA_RETURN_IF_ERROR(ReadNumber(v, f, 0.0, /*strict=*/true, rope_theta));
    } else if (!Contains(info->required, k) && !Contains(info->optional, k)) {
      return UnimplementedError(f + " = " + v.dump() + " is not a parameter of rope_type \"" +
                                info->name + "\" that Strata implements");
    } else if (k == "factor") {
      STRATA_RETURN_IF_ERROR(ReadNumber(v, f, 1.0, /*strict=*/false, &out->factor));
    } else if (k == "low_freq_factor") {
      STRATA_RETURN_IF_ERROR(ReadNumber(v, f, 0.0, /*strict=*/true, &out->low_freq_factor));
    } else if (k == "high_freq_factor") {
      STRATA_RETURN_IF_ERROR(ReadNumber(v, f, 0.0, /*strict=*/true, &out->high_freq_factor));
    } else if (k == "original_max_position_embeddings") {
      if (v.is_null() && out->type == RopeType::kDynamic) continue;
      if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
        return InvalidArgumentError(f + " = " + v.dump() + " must be a positive integer");
      }
      out->original_max_position_embeddings = v.get<int64_t>();
    }
  }
  if (out->type == RopeType::kLlama3 && !(out->high_freq_factor > out->low_freq_factor)) {
    return InvalidArgumentError(
        field + ".high_freq_factor' = " + nlohmann::json(out->high_freq_factor).dump() +
        " must be greater than low_freq_factor = " + nlohmann::json(out->low_freq_factor).dump());
  }
  return Status::Ok();
}

nlohmann::json RopeScalingJson(const RopeScaling& s) {
  if (s.type == RopeType::kDefault) return nullptr;
  nlohmann::json j = {{"factor", s.factor}, {"rope_type", std::string(RopeTypeName(s.type))}};
  if (s.type == RopeType::kLlama3) {
    j["low_freq_factor"] = s.low_freq_factor;
    j["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.original_max_position_embeddings > 0) {
    j["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  return j;
}

std::vector<double> RopeInvFreq(const RopeScaling& s, int64_t head_dim, double rope_theta,
                                int64_t max_position_embeddings, int64_t seq_len) {
  const double dim = static_cast<double>(head_dim);
  double base = rope_theta;
  if (s.type == RopeType::kDynamic && seq_len > max_position_embeddings) {
    const double ratio =
        static_cast<double>(seq_len) / static_cast<double>(max_position_embeddings);
    base *= std::pow(s.factor * ratio - (s.factor - 1.0), dim / (dim - 2.0));
  }
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (size_t j = 0; j < inv.size(); ++j) {
    inv[j] = 1.0 / std::pow(base, static_cast<double>(2 * j) / dim);
  }
  if (s.type == RopeType::kLinear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RopeType::kLlama3) {
    const double context = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = context / s.low_freq_factor;    // longer: scaled by 1 / factor
    const double high_wavelen = context / s.high_freq_factor;  // shorter: kept
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth =
            (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

void RopeTableRow(const std::vector<double>& inv_freq, int64_t position, float* cos, float* sin) {
  for (size_t j = 0; j < inv_freq.size(); ++j) {
    const double angle = static_cast<double>(position) * inv_freq[j];
    cos[j] = static_cast<float>(std::cos(angle));
    sin[j] = static_cast<float>(std::sin(angle));
  }
}

void RopeTables(const std::vector<double>& inv_freq, int64_t num_positions, std::vector<float>* cos,
                std::vector<float>* sin) {
  const size_t half = inv_freq.size();
  cos->resize(static_cast<size_t>(num_positions) * half);
  sin->resize(cos->size());
  for (int64_t p = 0; p < num_positions; ++p) {
    const size_t row = static_cast<size_t>(p) * half;
    RopeTableRow(inv_freq, p, cos->data() + row, sin->data() + row);
  }
}

}  // namespace strata::llama
