#include "data/chat_template/jinja/value/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace strata::data::jinja {

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::MakeList(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeTuple(List items) {
  Value v = MakeList(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::MakeNamespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::MakeFunction(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), FromJson(*it));
      return MakeDict(std::move(items));
    }
    default:
      return None();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    default:
      return true;
  }
}

std::string PyFloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  // Python's repr: shortest round-trip digits; exponent form when exp < -4 or >= 16.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  if (exp < -4 || exp >= 16) {
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return mant + eb;
  }
  auto [end2, ec2] = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::fixed);
  std::string fixed(buf, end2);
  if (fixed.find('.') == std::string::npos) fixed += ".0";
  return fixed;
}

int64_t Utf8Length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

std::string PyStrRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

void JsonString(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

Status JsonValue(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      out += v.b() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      out += std::to_string(v.i());
      return Status::Ok();
    case Value::Kind::kFloat:
      out += std::isnan(v.AsDouble())   ? "NaN"
             : std::isinf(v.AsDouble()) ? (v.AsDouble() > 0 ? "Infinity" : "-Infinity")
                                        : PyFloatRepr(v.AsDouble());
      return Status::Ok();
    case Value::Kind::kString:
      JsonString(v.s(), out);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return Status::Ok();
      }
      out += '[';
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        STRATA_RETURN_IF_ERROR(JsonValue(v.list()[k], indent, sort_keys, depth + 1, out));
      }
      newline(depth);
      out += ']';
      return Status::Ok();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) {
        out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        JsonString(items[k]->first, out);
        out += ": ";
        STRATA_RETURN_IF_ERROR(JsonValue(items[k]->second, indent, sort_keys, depth + 1, out));
      }
      newline(depth);
      out += '}';
      return Status::Ok();
    }
    default:
      return InvalidArgumentError(std::string("tojson: a value of type ") +
                                  std::string(v.TypeName()) + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return PyFloatRepr(f_);
    case Kind::kString:
      return PyStrRepr(s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t k = 0; k < list_->size(); ++k) out += (k ? ", " : "") + (*list_)[k].Repr();
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      for (size_t k = 0; k < dict_->size(); ++k) {
        out += (k ? ", " : "") + PyStrRepr((*dict_)[k].first) + ": " + (*dict_)[k].second.Repr();
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function " + s_ + ">";
  }
  return "";
}

Result<std::string> Value::ToJson(int indent, bool sort_keys) const {
  std::string out;
  STRATA_RETURN_IF_ERROR(JsonValue(*this, indent, sort_keys, 0, out));
  return out;
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return AsDouble() == o.AsDouble();
    return i() == o.i();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return s_ == o.s_;
    case Kind::kList:
      if (list_->size() != o.list_->size()) return false;
      for (size_t k = 0; k < list_->size(); ++k) {
        if (!(*list_)[k].Equals((*o.list_)[k])) return false;
      }
      return true;
    case Kind::kDict:
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [key, val] : *dict_) {
        const Value* other = o.Find(key);
        if (!other || !val.Equals(*other)) return false;
      }
      return true;
    default:
      return list_ == o.list_ && dict_ == o.dict_ && fn_ == o.fn_;
  }
}

const Value* Value::Find(std::string_view key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& kv : *dict_) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

}  // namespace strata::data::jinja
