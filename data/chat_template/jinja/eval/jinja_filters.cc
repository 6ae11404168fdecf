// Jinja's filters as chat templates use them (jinja_builtins.h declares ApplyFilter).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "data/chat_template/jinja/eval/jinja_builtins.h"
#include "data/chat_template/jinja/eval/jinja_text.h"

namespace strata::data::jinja {

Result<Value> ApplyFilter(const std::string& name, const Value& v, std::vector<Value>& args,
                          Kwargs& kwargs) {
  using namespace internal;  // NOLINT: jinja_text.h's helpers, here only (a unity build shares
                             // a namespace-scope directive with the files after this one)
  std::string what = "filter '" + name + "'";
  if (name == "trim") return Value::Str(Strip(v.Str(), Arg(args, kwargs, 0, "chars"), true, true));
  if (name == "tojson") {
    Value indent = Arg(args, kwargs, 0, "indent", Value::None());
    STRATA_ASSIGN_OR_RETURN(
        std::string s, v.ToJson(indent.is_none() ? -1 : static_cast<int>(indent.i()),
                                Arg(args, kwargs, 3, "sort_keys", Value::Bool(false)).Truthy()));
    return Value::Str(std::move(s));
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(Utf8Length(v.s()));
    if (v.is_list()) return Value::Int(static_cast<int64_t>(v.list().size()));
    if (v.is_mapping()) return Value::Int(static_cast<int64_t>(v.dict().size()));
    if (v.is_undefined()) return Value::Int(0);
    return ArgError(what, "a value of type " + std::string(v.TypeName()) + " has no length");
  }
  if (name == "string") return Value::Str(v.Str());
  if (name == "safe") return v;
  if (name == "upper") return Value::Str(Upper(v.Str()));
  if (name == "lower") return Value::Str(Lower(v.Str()));
  if (name == "title") return Value::Str(Title(v.Str()));
  if (name == "capitalize") {
    std::vector<Value> none;
    Kwargs nokw;
    return CallMethod(Value::Str(v.Str()), "capitalize", none, nokw);
  }
  if (name == "replace") {
    Value a = Arg(args, kwargs, 0, "old"), b = Arg(args, kwargs, 1, "new");
    return Value::Str(
        Replace(v.Str(), a.Str(), b.Str(), Arg(args, kwargs, 2, "count", Value::Int(-1)).i()));
  }
  if (name == "default" || name == "d") {
    bool boolean = Arg(args, kwargs, 1, "boolean", Value::Bool(false)).Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy()))
      return Arg(args, kwargs, 0, "default_value", Value::Str(""));
    return v;
  }
  if (name == "int") {
    if (v.is_string()) {
      char* end = nullptr;
      long long x = std::strtoll(v.s().c_str(), &end, 10);
      return Value::Int(end && *end == 0 && !v.s().empty()
                            ? x
                            : Arg(args, kwargs, 0, "default", Value::Int(0)).i());
    }
    if (v.is_number()) return Value::Int(static_cast<int64_t>(v.AsDouble()));
    return Arg(args, kwargs, 0, "default", Value::Int(0));
  }
  if (name == "float") {
    if (v.is_string()) return Value::Float(std::strtod(v.s().c_str(), nullptr));
    if (v.is_number()) return Value::Float(v.AsDouble());
    return Value::Float(0);
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.AsDouble()));
    return Value::Int(std::llabs(v.i()));
  }
  if (name == "round") {
    double scale =
        std::pow(10.0, static_cast<double>(Arg(args, kwargs, 0, "precision", Value::Int(0)).i()));
    return Value::Float(std::round(v.AsDouble() * scale) / scale);
  }
  if (name == "items" || name == "dictsort") {
    if (!v.is_mapping()) return ArgError(what, "needs a dict, not " + std::string(v.TypeName()));
    List out;
    for (const auto& [k, x] : v.dict()) out.push_back(Value::MakeTuple({Value::Str(k), x}));
    if (name == "dictsort") {
      std::stable_sort(out.begin(), out.end(), [](const Value& a, const Value& b) {
        return Lower(a.list()[0].s()) < Lower(b.list()[0].s());
      });
    }
    return Value::MakeList(std::move(out));
  }
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(v));
  if (name == "list") return Value::MakeList(std::move(items));  // a tuple's items too
  if (name == "first") return items.empty() ? Value::Undefined("first") : items.front();
  if (name == "last") return items.empty() ? Value::Undefined("last") : items.back();
  if (name == "reverse") {
    if (v.is_string()) {
      std::string out;
      for (auto it = items.rbegin(); it != items.rend(); ++it) out += it->s();
      return Value::Str(out);
    }
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "join") {
    std::string sep = Arg(args, kwargs, 0, "d", Value::Str("")).Str();
    Value attr = Arg(args, kwargs, 1, "attribute", Value::None());
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      out += (k ? sep : "") + (attr.is_none() ? items[k] : GetPath(items[k], attr.Str())).Str();
    }
    return Value::Str(out);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    bool attr_form = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "selectattr" || name == "select";
    size_t first = attr_form ? 1 : 0;
    List out;
    for (const auto& item : items) {
      Value x = attr_form ? GetPath(item, Arg(args, kwargs, 0, "attribute").Str()) : item;
      bool pass;
      if (args.size() > first) {
        std::vector<Value> test_args(args.begin() + static_cast<ptrdiff_t>(first) + 1, args.end());
        STRATA_ASSIGN_OR_RETURN(pass, ApplyTest(args[first].Str(), x, test_args));
      } else {
        pass = x.Truthy();
      }
      if (pass == keep_if) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "map") {
    Value attr = Arg(args, kwargs, 99, "attribute", Value::None());
    List out;
    for (const auto& item : items) {
      if (!attr.is_none()) {
        Value x = GetPath(item, attr.Str());
        if (x.is_undefined()) x = Arg(args, kwargs, 99, "default", x);
        out.push_back(x);
      } else {
        if (args.empty()) return ArgError(what, "needs a filter name or attribute=");
        std::vector<Value> rest(args.begin() + 1, args.end());
        Kwargs nokw;
        STRATA_ASSIGN_OR_RETURN(Value x, ApplyFilter(args[0].Str(), item, rest, nokw));
        out.push_back(x);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "unique") {
    List out;
    for (const auto& item : items) {
      bool seen = false;
      for (const auto& o : out) seen = seen || o.Equals(item);
      if (!seen) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "sort") {
    bool reverse = Arg(args, kwargs, 0, "reverse", Value::Bool(false)).Truthy();
    Value attr = Arg(args, kwargs, 2, "attribute", Value::None());
    Status err;
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      Value x = attr.is_none() ? a : GetPath(a, attr.Str());
      Value y = attr.is_none() ? b : GetPath(b, attr.Str());
      auto r = reverse ? Less(y, x) : Less(x, y);
      if (!r.ok()) err = r.status();
      return r.ok() && *r;
    });
    STRATA_RETURN_IF_ERROR(err);
    return Value::MakeList(std::move(items));
  }
  return UnimplementedError("the " + what + " is not supported in chat templates");
}

}  // namespace strata::data::jinja
