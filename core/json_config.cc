#include "core/json_config.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata {
namespace {

std::string KeyPath(std::string_view path, std::string_view key) {
  std::string p(path);
  if (!p.empty()) p += '.';
  p += key;
  return p;
}

std::string Join(std::initializer_list<std::string_view> items) {
  std::string s;
  for (auto it : items) {
    if (!s.empty()) s += ", ";
    s += it;
  }
  return s;
}

bool IsAuto(const nlohmann::json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

}  // namespace

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Status CheckKnownKeys(const nlohmann::json& section, std::string_view path,
                      std::initializer_list<std::string_view> allowed) {
  if (!section.is_object()) {
    return InvalidArgumentError("config '" + std::string(path) + "' must be an object, got " +
                                section.type_name());
  }
  for (const auto& [key, value] : section.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string_view best;
    int best_d = 1 << 30;
    for (auto a : allowed) {
      int d = EditDistance(key, a);
      if (d < best_d) best_d = d, best = a;
    }
    std::string m = "unknown config key '" + KeyPath(path, key) + "'";
    if (!best.empty() && best_d <= std::max<int>(2, static_cast<int>(key.size()) / 3)) {
      m += " (did you mean '" + std::string(best) + "'?)";
    }
    m += "; allowed keys: " + Join(allowed);
    return InvalidArgumentError(std::move(m));
  }
  return Status::Ok();
}

Status ReadInt(const nlohmann::json& section, std::string_view path, const char* key,
               int64_t min_value, int64_t max_value, int64_t* out) {
  auto it = section.find(key);
  if (it == section.end() || IsAuto(*it)) return Status::Ok();
  double v = 0;
  if (it->is_number_integer() || it->is_number_unsigned()) {
    v = it->get<double>();
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      v = 1e300;
    }
  } else if (it->is_number_float()) {
    v = it->get<double>();
    if (v != std::floor(v)) {
      return InvalidArgumentError("config '" + KeyPath(path, key) +
                                  "' must be a whole number, got " + it->dump());
    }
  } else {
    return InvalidArgumentError("config '" + KeyPath(path, key) + "' must be an integer, got " +
                                it->dump());
  }
  if (v < static_cast<double>(min_value) || v > static_cast<double>(max_value)) {
    return InvalidArgumentError("config '" + KeyPath(path, key) + "' = " + it->dump() +
                                " is out of range [" + std::to_string(min_value) + ", " +
                                std::to_string(max_value) + "]");
  }
  *out = it->is_number_float() ? static_cast<int64_t>(v) : it->get<int64_t>();
  return Status::Ok();
}

Status ReadBool(const nlohmann::json& section, std::string_view path, const char* key, bool* out) {
  auto it = section.find(key);
  if (it == section.end() || IsAuto(*it)) return Status::Ok();
  if (!it->is_boolean()) {
    return InvalidArgumentError("config '" + KeyPath(path, key) + "' must be true or false, got " +
                                it->dump());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

Status ReadDouble(const nlohmann::json& section, std::string_view path, const char* key,
                  double* out) {
  auto it = section.find(key);
  if (it == section.end() || IsAuto(*it)) return Status::Ok();
  if (!it->is_number()) {
    return InvalidArgumentError("config '" + KeyPath(path, key) + "' must be a number, got " +
                                it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status ReadEnum(const nlohmann::json& section, std::string_view path, const char* key,
                std::initializer_list<std::string_view> allowed, std::string* out) {
  auto it = section.find(key);
  if (it == section.end()) return Status::Ok();
  if (!it->is_string() ||
      std::find(allowed.begin(), allowed.end(), it->get<std::string>()) == allowed.end()) {
    return InvalidArgumentError("config '" + KeyPath(path, key) + "' = " + it->dump() +
                                " is not allowed; allowed values: " + Join(allowed));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

}  // namespace strata
