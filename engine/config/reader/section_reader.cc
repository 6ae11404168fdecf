#include "engine/config/reader/section_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>
#include <tuple>

#include "core/json_config.h"
#include "core/units.h"

namespace strata::internal {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> w;
  std::string cur;
  for (char c : Lower(s)) {
    if (c == '_' || c == '-' || c == '.') {
      if (!cur.empty()) w.push_back(cur), cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) w.push_back(cur);
  std::sort(w.begin(), w.end());
  return w;
}

// A string the way pydantic reads a number: "8", " 1e-5 ".
bool ParseNumberString(std::string_view text, double* out) {
  std::string t = Trim(text);
  if (t.empty()) return false;
  const char* first = t.data();
  if (*first == '+') ++first;
  auto [p, ec] = std::from_chars(first, t.data() + t.size(), *out);
  return ec == std::errc() && p == t.data() + t.size() && std::isfinite(*out);
}

std::string FormatDouble(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string JoinQuoted(const std::vector<std::string_view>& items) {
  std::string s;
  for (auto it : items) {
    if (!s.empty()) s += ", ";
    s += "\"" + std::string(it) + "\"";
  }
  return s;
}

}  // namespace

std::string ClosestKey(std::string_view key, const std::vector<std::string_view>& candidates) {
  const std::string lkey = Lower(key);
  const auto kwords = Words(key);
  std::string_view best;
  // (closeness, raw edit distance, first letter differs): a typo rarely hits the first letter,
  // so "bp16" is "bf16" rather than "fp16".
  std::tuple<int, int, bool> best_score{1 << 30, 1 << 30, true};
  for (auto c : candidates) {
    const std::string lc = Lower(c);
    const int raw = EditDistance(lkey, lc);
    int d = raw;
    // The same words in another order ("comm_overlap" for "overlap_comm").
    if (Words(c) == kwords) d = std::min(d, 1);
    // One is most of the other ("micro_batch_size_per_gpu" in "train_micro_batch_size_per_gpu").
    const size_t shorter = std::min(lkey.size(), lc.size());
    const size_t longer = std::max(lkey.size(), lc.size());
    if (shorter >= 4 && 2 * shorter >= longer &&
        (lc.find(lkey) != std::string::npos || lkey.find(lc) != std::string::npos)) {
      d = std::min(d, 2);
    }
    const bool first_differs = lkey.empty() || lc.empty() || lkey[0] != lc[0];
    if (std::tuple(d, raw, first_differs) < best_score) {
      best_score = {d, raw, first_differs};
      best = c;
    }
  }
  const int limit = std::clamp(static_cast<int>(key.size()) / 4, 2, 3);
  const int closeness = std::get<0>(best_score);
  if (best.empty() || closeness > limit || (key.size() <= 4 && closeness > 1)) {
    return "";
  }
  return std::string(best);
}

void ConfigContext::Add(Severity severity, const std::string& path, std::string message) {
  report_->diagnostics.push_back({severity, path, doc_.Find(path), std::move(message)});
}

void ConfigContext::SetOrigin(const std::string& path, OriginKind kind, std::string detail) {
  report_->origins[path] = {kind, std::move(detail)};
}

const Json* Section::Get(std::string_view key) const {
  if (!node_) return nullptr;
  auto it = node_->find(key);
  return it == node_->end() ? nullptr : &*it;
}

bool Section::IsAuto(std::string_view key) const {
  const Json* v = Get(key);
  return v && v->is_string() && v->get_ref<const std::string&>() == "auto";
}

void Section::CheckKeys(const std::vector<std::string_view>& known,
                        const std::map<std::string_view, std::string_view>& hints) const {
  if (!node_) return;
  for (const auto& [key, value] : node_->items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string m = "unknown key";
    if (auto h = hints.find(key); h != hints.end()) {
      m += ": " + std::string(h->second);
    } else if (std::string s = ClosestKey(key, known); !s.empty()) {
      m += " (did you mean '" + s + "'?)";
    } else if (known.size() <= 14) {
      m += "; allowed keys: " + JoinQuoted(known);
    } else {
      m += "; docs/config.md lists the keys of '" + path_ + "'";
    }
    ctx_->Error(KeyPath(key), std::move(m));
  }
}

Got Section::Begin(std::string_view key, bool auto_ok, const Json** value) const {
  const std::string p = KeyPath(key);
  const Json* v = Get(key);
  if (!v) {
    ctx_->SetOrigin(p, OriginKind::kDefault);
    return Got::kAbsent;
  }
  if (v->is_string() && v->get_ref<const std::string&>() == "auto") {
    if (!auto_ok) {
      ctx_->Error(p,
                  "\"auto\" is not resolvable here: nothing (Hugging Face, the run or the "
                  "model) fills this key in; write a value");
      return Got::kInvalid;
    }
    ctx_->SetOrigin(p, OriginKind::kAuto, "default");
    return Got::kAuto;
  }
  *value = v;
  return Got::kValue;
}

Got Section::Int(std::string_view key, int64_t* out, int64_t min_value, int64_t max_value,
                 bool auto_ok) const {
  const Json* v = nullptr;
  Got g = Begin(key, auto_ok, &v);
  if (g != Got::kValue) return g;
  const std::string p = KeyPath(key);
  double d = 0;
  bool coerced = false;
  if (v->is_number_integer()) {
    d = static_cast<double>(v->get<int64_t>());
  } else if (v->is_number_unsigned()) {
    d = static_cast<double>(v->get<uint64_t>());
  } else if (v->is_number_float()) {
    d = v->get<double>();
  } else if (v->is_string() && ParseNumberString(v->get_ref<const std::string&>(), &d)) {
    coerced = true;
  } else {
    ctx_->Error(p, "must be an integer, got " + v->dump());
    return Got::kInvalid;
  }
  if (d != std::floor(d)) {
    ctx_->Error(p, "must be a whole number, got " + v->dump());
    return Got::kInvalid;
  }
  if (d < static_cast<double>(min_value) || d > static_cast<double>(max_value)) {
    std::string range = max_value == kMaxInt ? ">= " + std::to_string(min_value)
                                             : "in [" + std::to_string(min_value) + ", " +
                                                   std::to_string(max_value) + "]";
    ctx_->Error(p, "= " + v->dump() + " is out of range: must be " + range);
    return Got::kInvalid;
  }
  *out = v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(d);
  ctx_->SetOrigin(p, OriginKind::kFile, coerced ? "string " + v->dump() + " read as a number" : "");
  return Got::kValue;
}

Got Section::Double(std::string_view key, double* out, double min_value, double max_value,
                    bool auto_ok) const {
  const Json* v = nullptr;
  Got g = Begin(key, auto_ok, &v);
  if (g != Got::kValue) return g;
  const std::string p = KeyPath(key);
  double d = 0;
  bool coerced = false;
  if (v->is_number()) {
    d = v->get<double>();
  } else if (v->is_string() && ParseNumberString(v->get_ref<const std::string&>(), &d)) {
    coerced = true;
  } else {
    ctx_->Error(p, "must be a number, got " + v->dump());
    return Got::kInvalid;
  }
  if (d < min_value || d > max_value) {
    std::string range =
        max_value == kInf ? ">= " + FormatDouble(min_value)
                          : "in [" + FormatDouble(min_value) + ", " + FormatDouble(max_value) + "]";
    ctx_->Error(p, "= " + v->dump() + " is out of range: must be " + range);
    return Got::kInvalid;
  }
  *out = d;
  ctx_->SetOrigin(p, OriginKind::kFile, coerced ? "string " + v->dump() + " read as a number" : "");
  return Got::kValue;
}

Got Section::Bool(std::string_view key, bool* out, bool auto_ok) const {
  const Json* v = nullptr;
  Got g = Begin(key, auto_ok, &v);
  if (g != Got::kValue) return g;
  const std::string p = KeyPath(key);
  bool coerced = true;
  if (v->is_boolean()) {
    *out = v->get<bool>();
    coerced = false;
  } else if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1)) {
    *out = v->get<int64_t>() == 1;
  } else if (v->is_string()) {
    std::string s = Lower(Trim(v->get_ref<const std::string&>()));
    if (s == "true" || s == "1" || s == "yes" || s == "y" || s == "on" || s == "t") {
      *out = true;
    } else if (s == "false" || s == "0" || s == "no" || s == "n" || s == "off" || s == "f") {
      *out = false;
    } else {
      ctx_->Error(p, "must be true or false, got " + v->dump());
      return Got::kInvalid;
    }
  } else {
    ctx_->Error(p, "must be true or false, got " + v->dump());
    return Got::kInvalid;
  }
  ctx_->SetOrigin(p, OriginKind::kFile,
                  coerced ? v->dump() + " read as " + (*out ? "true" : "false") : "");
  return Got::kValue;
}

Got Section::Enum(std::string_view key, std::string* out,
                  const std::vector<std::string_view>& allowed, bool ignore_case,
                  bool auto_ok) const {
  const Json* v = nullptr;
  Got g = Begin(key, auto_ok, &v);
  if (g != Got::kValue) return g;
  const std::string p = KeyPath(key);
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    for (auto a : allowed) {
      if (s == a || (ignore_case && Lower(s) == Lower(a))) {
        *out = std::string(a);
        ctx_->SetOrigin(p, OriginKind::kFile);
        return Got::kValue;
      }
    }
  }
  std::string m = "= " + v->dump() + " is not allowed; allowed values: " + JoinQuoted(allowed);
  if (v->is_string()) {
    if (std::string s = ClosestKey(v->get_ref<const std::string&>(), allowed); !s.empty()) {
      m += " (did you mean \"" + s + "\"?)";
    }
  }
  ctx_->Error(p, std::move(m));
  return Got::kInvalid;
}

Got Section::String(std::string_view key, std::string* out) const {
  const Json* v = nullptr;
  Got g = Begin(key, false, &v);
  if (g != Got::kValue) return g;
  if (!v->is_string()) {
    ctx_->Error(KeyPath(key), "must be a string, got " + v->dump());
    return Got::kInvalid;
  }
  *out = v->get<std::string>();
  ctx_->SetOrigin(KeyPath(key), OriginKind::kFile);
  return Got::kValue;
}

Got Section::Bytes(std::string_view key, uint64_t* out) const {
  const Json* v = nullptr;
  Got g = Begin(key, false, &v);
  if (g != Got::kValue) return g;
  const std::string p = KeyPath(key);
  if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) {
    *out = v->get<uint64_t>();
  } else if (v->is_number_float() && v->get<double>() >= 0 &&
             v->get<double>() == std::floor(v->get<double>()) && v->get<double>() < 1.8e19) {
    *out = static_cast<uint64_t>(v->get<double>());
  } else if (v->is_string()) {
    Result<uint64_t> r = ParseByteSize(v->get_ref<const std::string&>());
    if (!r.ok()) {
      ctx_->Error(p, "= " + v->dump() +
                         " is not a byte size; write bytes or e.g. \"512M\", "
                         "\"2G\"");
      return Got::kInvalid;
    }
    *out = *r;
  } else {
    ctx_->Error(p, "must be a byte size (bytes, or e.g. \"2G\"), got " + v->dump());
    return Got::kInvalid;
  }
  ctx_->SetOrigin(p, OriginKind::kFile);
  return Got::kValue;
}

Section Section::Object(std::string_view key) const {
  const Json* v = Get(key);
  if (v && !v->is_object()) {
    ctx_->Error(KeyPath(key), "must be an object ({...}), got " + v->dump());
    return Section(ctx_, nullptr, KeyPath(key));
  }
  return Section(ctx_, v, KeyPath(key));
}

}  // namespace strata::internal
