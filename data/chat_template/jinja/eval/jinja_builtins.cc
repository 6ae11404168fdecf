#include "data/chat_template/jinja/eval/jinja_builtins.h"

#include "data/chat_template/jinja/eval/jinja_text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace strata::data::jinja {
namespace internal {

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}

Status ArgError(const std::string& what, const std::string& msg) {
  return InvalidArgumentError(what + ": " + msg);
}

// Positional argument k, else keyword `name`, else `fallback`.
Value Arg(std::vector<Value>& args, Kwargs& kwargs, size_t k, const char* name, Value fallback) {
  if (k < args.size()) return args[k];
  for (auto& [key, v] : kwargs) {
    if (key == name) return v;
  }
  return fallback;
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    if (chars.is_string()) return chars.s().find(c) != std::string::npos;
    return IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {
    size_t p = 0;
    while (p < s.size()) {
      while (p < s.size() && IsPySpace(s[p])) ++p;
      if (p >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > p && IsPySpace(s[e - 1])) --e;
        out.push_back(Value::Str(s.substr(p, e - p)));
        break;
      }
      size_t e = p;
      while (e < s.size() && !IsPySpace(s[e])) ++e;
      out.push_back(Value::Str(s.substr(p, e - p)));
      p = e;
    }
    return Value::MakeList(std::move(out));
  }
  size_t p = 0;
  for (;;) {
    size_t e = s.find(sep.s(), p);
    if (e == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::Str(s.substr(p)));
      break;
    }
    out.push_back(Value::Str(s.substr(p, e - p)));
    p = e + sep.s().size();
  }
  return Value::MakeList(std::move(out));
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (auto& c : out) {
    bool alpha = std::isalpha(static_cast<unsigned char>(c));
    c = static_cast<char>(alpha && !prev_alpha ? std::toupper(static_cast<unsigned char>(c))
                                               : std::tolower(static_cast<unsigned char>(c)));
    prev_alpha = alpha;
  }
  return out;
}
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t p = 0;
  int64_t n = 0;
  for (;;) {
    size_t e = s.find(from, p);
    if (e == std::string::npos || (count >= 0 && n == count)) break;
    out += s.substr(p, e - p) + to;
    p = e + from.size();
    ++n;
  }
  return out + s.substr(p);
}

// Jinja's environment.getitem for a dotted attribute path ("a.b" or "0").
Value GetPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t p = 0;
  while (p <= path.size()) {
    size_t e = path.find('.', p);
    if (e == std::string::npos) e = path.size();
    std::string part = path.substr(p, e - p);
    if (cur.is_mapping()) {
      const Value* f = cur.Find(part);
      cur = f ? *f : Value::Undefined(part);
    } else if (cur.is_list() && !part.empty() &&
               std::isdigit(static_cast<unsigned char>(part[0]))) {
      size_t idx = std::strtoull(part.c_str(), nullptr, 10);
      cur = idx < cur.list().size() ? cur.list()[idx] : Value::Undefined(part);
    } else {
      return Value::Undefined(part);
    }
    p = e + 1;
  }
  return cur;
}

std::vector<uint32_t> CodePoints(const std::string& s, std::vector<std::string>& chars) {
  std::vector<uint32_t> starts;
  for (size_t k = 0; k < s.size(); ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80)
      starts.push_back(static_cast<uint32_t>(k));
  }
  for (size_t k = 0; k < starts.size(); ++k) {
    size_t e = k + 1 < starts.size() ? starts[k + 1] : s.size();
    chars.push_back(s.substr(starts[k], e - starts[k]));
  }
  return starts;
}

}  // namespace internal

Result<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.AsDouble() < b.AsDouble();
  if (a.is_string() && b.is_string()) return a.s() < b.s();
  return InvalidArgumentError(std::string("'<' is not supported between ") +
                              std::string(a.TypeName()) + " and " + std::string(b.TypeName()));
}

Result<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return InvalidArgumentError("'in <string>' requires a string on the left, not " +
                                  std::string(item.TypeName()));
    }
    return container.s().find(item.s()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& v : container.list()) {
      if (v.Equals(item)) return true;
    }
    return false;
  }
  if (container.is_mapping()) return item.is_string() && container.Find(item.s()) != nullptr;
  return InvalidArgumentError("'in' needs a string, list or dict on the right, not " +
                              std::string(container.TypeName()));
}

Result<List> Iterate(const Value& v) {
  using namespace internal;  // NOLINT: the helpers above (jinja_text.h), here only
  if (v.is_list()) return v.list();
  if (v.is_mapping()) {
    List keys;
    for (const auto& kv : v.dict()) keys.push_back(Value::Str(kv.first));
    return keys;
  }
  if (v.is_string()) {
    std::vector<std::string> chars;
    CodePoints(v.s(), chars);
    List out;
    for (auto& c : chars) out.push_back(Value::Str(c));
    return out;
  }
  if (v.is_undefined()) return List{};  // Jinja iterates an undefined value as empty
  return InvalidArgumentError("a value of type " + std::string(v.TypeName()) + " is not iterable");
}

Result<Value> Slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  using namespace internal;  // NOLINT: the helpers above (jinja_text.h), here only
  std::vector<std::string> chars;
  int64_t n = 0;
  if (v.is_list()) {
    n = static_cast<int64_t>(v.list().size());
  } else if (v.is_string()) {
    CodePoints(v.s(), chars);
    n = static_cast<int64_t>(chars.size());
  } else {
    return InvalidArgumentError("cannot slice a value of type " + std::string(v.TypeName()));
  }
  int64_t st = step.is_none() || step.is_undefined() ? 1 : step.i();
  if (st == 0) return InvalidArgumentError("slice step cannot be zero");
  auto norm = [&](const Value& x, int64_t dflt) -> int64_t {
    if (x.is_none() || x.is_undefined()) return dflt;
    int64_t k = x.i();
    if (k < 0) k += n;
    if (st > 0) return std::clamp<int64_t>(k, 0, n);
    return std::clamp<int64_t>(k, -1, n - 1);
  };
  int64_t b = norm(start, st > 0 ? 0 : n - 1);
  int64_t e = norm(stop, st > 0 ? n : -1);
  List items;
  std::string s;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
    if (v.is_list()) {
      items.push_back(v.list()[static_cast<size_t>(k)]);
    } else {
      s += chars[static_cast<size_t>(k)];
    }
  }
  return v.is_list() ? Value::MakeList(std::move(items)) : Value::Str(std::move(s));
}

bool HasMethod(const Value& object, const std::string& name) {
  static const char* kStr[] = {"strip",   "lstrip", "rstrip", "startswith", "endswith",
                               "split",   "upper",  "lower",  "title",      "capitalize",
                               "replace", "find",   "count",  "join"};
  static const char* kDict[] = {"items", "keys", "values", "get"};
  if (object.is_string()) {
    for (const char* m : kStr) {
      if (name == m) return true;
    }
  }
  if (object.kind() == Value::Kind::kDict) {
    for (const char* m : kDict) {
      if (name == m) return true;
    }
  }
  return false;
}

Result<Value> CallMethod(const Value& object, const std::string& name, std::vector<Value>& args,
                         Kwargs& kwargs) {
  using namespace internal;  // NOLINT: the helpers above (jinja_text.h), here only
  std::string what = std::string(object.TypeName()) + "." + name + "()";
  if (object.is_string()) {
    const std::string& s = object.s();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value::Str(
          Strip(s, Arg(args, kwargs, 0, "chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
      Value pre = Arg(args, kwargs, 0, "prefix");
      List options = pre.is_list() ? pre.list() : List{pre};
      for (const auto& o : options) {
        if (!o.is_string()) return ArgError(what, "the argument must be a string");
        const std::string& x = o.s();
        bool hit = name == "startswith"
                       ? s.compare(0, x.size(), x) == 0
                       : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (name == "split") {
      Value sep = Arg(args, kwargs, 0, "sep", Value::None());
      if (sep.is_string() && sep.s().empty()) return ArgError(what, "empty separator");
      return Split(s, sep, Arg(args, kwargs, 1, "maxsplit", Value::Int(-1)).i());
    }
    if (name == "upper") return Value::Str(Upper(s));
    if (name == "lower") return Value::Str(Lower(s));
    if (name == "title") return Value::Str(Title(s));
    if (name == "capitalize") {
      std::string out = Lower(s);
      if (!out.empty())
        out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
      return Value::Str(out);
    }
    if (name == "replace") {
      Value a = Arg(args, kwargs, 0, "old"), b = Arg(args, kwargs, 1, "new");
      if (!a.is_string() || !b.is_string()) return ArgError(what, "needs two strings");
      return Value::Str(
          Replace(s, a.s(), b.s(), Arg(args, kwargs, 2, "count", Value::Int(-1)).i()));
    }
    if (name == "find" || name == "count") {
      Value a = Arg(args, kwargs, 0, "sub");
      if (!a.is_string()) return ArgError(what, "needs a string");
      if (name == "find") {
        size_t p = s.find(a.s());
        return Value::Int(p == std::string::npos ? -1 : Utf8Length(s.substr(0, p)));
      }
      int64_t n = 0;
      for (size_t p = s.find(a.s()); p != std::string::npos && !a.s().empty();
           p = s.find(a.s(), p + a.s().size())) {
        ++n;
      }
      return Value::Int(n);
    }
    if (name == "join") {
      STRATA_ASSIGN_OR_RETURN(List items, Iterate(Arg(args, kwargs, 0, "iterable")));
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) out += (k ? s : "") + items[k].Str();
      return Value::Str(out);
    }
  }
  if (object.kind() == Value::Kind::kDict) {
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : object.dict()) {
        if (name == "items") {
          out.push_back(Value::MakeTuple({Value::Str(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::Str(k) : v);
        }
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "get") {
      Value key = Arg(args, kwargs, 0, "key");
      const Value* f = key.is_string() ? object.Find(key.s()) : nullptr;
      return f ? *f : Arg(args, kwargs, 1, "default", Value::None());
    }
  }
  return UnimplementedError("the method " + what +
                            " is not supported in chat templates (strings: strip, lstrip, rstrip, "
                            "startswith, endswith, split, upper, lower, title, capitalize, "
                            "replace, find, count, join; dicts: items, keys, values, get)");
}

Result<bool> ApplyTest(const std::string& name, const Value& v, std::vector<Value>& args) {
  using namespace internal;  // NOLINT: the helpers above (jinja_text.h), here only
  Value a = args.empty() ? Value() : args[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.b();
  if (name == "false") return v.is_bool() && !v.b();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() && !v.is_bool();
  if (name == "integer") return v.kind() == Value::Kind::kInt;
  if (name == "float") return v.kind() == Value::Kind::kFloat;
  if (name == "mapping") return v.is_mapping();
  if (name == "iterable") return v.is_list() || v.is_mapping() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_mapping() || v.is_string();
  if (name == "callable") return v.kind() == Value::Kind::kFunction;
  if (name == "lower") return v.is_string() && Lower(v.s()) == v.s();
  if (name == "upper") return v.is_string() && Upper(v.s()) == v.s();
  if (name == "equalto" || name == "eq" || name == "==") return v.Equals(a);
  if (name == "ne" || name == "!=") return !v.Equals(a);
  if (name == "sameas") return v.Equals(a) && v.kind() == a.kind();
  if (name == "lt" || name == "lessthan" || name == "<") return Less(v, a);
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(a, v);
  if (name == "le" || name == "<=") {
    STRATA_ASSIGN_OR_RETURN(bool gt, Less(a, v));
    return !gt;
  }
  if (name == "ge" || name == ">=") {
    STRATA_ASSIGN_OR_RETURN(bool lt, Less(v, a));
    return !lt;
  }
  if (name == "in") return Contains(a, v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != Value::Kind::kInt)
      return InvalidArgumentError("'is " + name + "' needs an integer");
    if (name == "divisibleby") return a.i() != 0 && v.i() % a.i() == 0;
    return (v.i() % 2 != 0) == (name == "odd");
  }
  return UnimplementedError("the test 'is " + name + "' is not supported in chat templates");
}

}  // namespace strata::data::jinja
