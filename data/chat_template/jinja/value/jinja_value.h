// Value: what a chat-template expression evaluates to, with Python's (and so Jinja2's) meaning
// for truth, equality, str() and json.dumps, so a template renders as transformers renders it.
//
// Lists, dicts and namespaces are shared by reference (as in Python): `ns.x = 1` through one copy
// is seen through every other. Dicts keep insertion order (JSON objects read in file order).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata::data::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
// A global function (range, namespace, raise_exception, ...) or a bound loop.cycle.
using Function = std::function<Result<Value>(std::vector<Value>& args, Kwargs& kwargs)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  static Value MakeList(List items = {});
  // A list that prints as a Python tuple ("(1, 2)"); otherwise a list.
  static Value MakeTuple(List items);
  static Value MakeDict(Dict items = {});
  static Value MakeNamespace(Dict items = {});
  static Value MakeFunction(std::string name, Function fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool b() const { return b_; }
  int64_t i() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double AsDouble() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i()); }
  const std::string& s() const { return s_; }
  // The name an undefined value was looked up by (for messages).
  const std::string& undefined_name() const { return s_; }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const Function& fn() const { return *fn_; }
  const std::string& fn_name() const { return s_; }

  // Python's bool(x); undefined is false.
  bool Truthy() const;
  // Python's str(x) as Jinja prints it ("None", "True", "1.0", "['a', 1]"); undefined is "".
  std::string Str() const;
  // Python's repr(x) (strings quoted as Python quotes them).
  std::string Repr() const;
  // json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys) as transformers' tojson
  // filter calls it (indent < 0: none). InvalidArgument for undefined or a function.
  Result<std::string> ToJson(int indent = -1, bool sort_keys = false) const;
  // Python ==.
  bool Equals(const Value& o) const;
  // Dict / namespace member, or nullptr.
  const Value* Find(std::string_view key) const;
  // A short name of the type for messages ("string", "list", ...).
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Python's repr of a float ("1.0", "0.1", "1e-05").
std::string PyFloatRepr(double f);
// Number of code points in UTF-8 text (Python's len of a str).
int64_t Utf8Length(std::string_view s);

}  // namespace strata::data::jinja
