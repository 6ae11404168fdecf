// Renders a chat template: the expressions (jinja_interpreter_impl.h) - literals, names,
// lists, tuples and dicts, attributes (a dict's methods before its keys), subscripts and slices,
// calls, filters and tests, and the unary, boolean and binary operators with Python's semantics.
#include <cmath>
#include <string>
#include <vector>

#include "data/chat_template/jinja/eval/jinja_builtins.h"
#include "data/chat_template/jinja/eval/jinja_interpreter_impl.h"

namespace strata::data::jinja::internal {

Status Interpreter::UndefinedError(int line, const Value& v) {
  return LineError(line, "'" + v.undefined_name() + "' is undefined");
}

Result<Value> Interpreter::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& a : e.args) {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*a));
        items.push_back(std::move(v));
      }
      if (e.kind == Expr::Kind::kTuple) return Value::MakeTuple(std::move(items));
      return Value::MakeList(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict items;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[k]));
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
        items.emplace_back(key.Str(), std::move(v));
      }
      return Value::MakeDict(std::move(items));
    }
    case Expr::Kind::kGetAttr: {
      STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (obj.is_undefined()) return UndefinedError(e.line, obj);
      // Jinja's getattr: a dict's methods come before its keys; other keys after.
      bool method = HasMethod(obj, e.name);
      if (!method || obj.is_string()) {
        if (const Value* f = obj.Find(e.name)) return *f;
      }
      if (method) {
        std::string name = e.name;
        return Value::MakeFunction(name, [obj, name](std::vector<Value>& a, Kwargs& kw) {
          return CallMethod(obj, name, a, kw);
        });
      }
      return Value::Undefined(e.name);
    }
    case Expr::Kind::kGetItem: {
      STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      STRATA_ASSIGN_OR_RETURN(Value idx, Eval(*e.args[1]));
      if (obj.is_undefined()) return UndefinedError(e.line, obj);
      return GetItem(obj, idx);
    }
    case Expr::Kind::kSlice: {
      STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      Value parts[3] = {Value::None(), Value::None(), Value::None()};
      for (int k = 0; k < 3; ++k) {
        if (e.args[static_cast<size_t>(k) + 1]) {
          STRATA_ASSIGN_OR_RETURN(parts[k], Eval(*e.args[static_cast<size_t>(k) + 1]));
        }
      }
      auto r = Slice(obj, parts[0], parts[1], parts[2]);
      if (!r.ok()) return LineError(e.line, r.status().message());
      return r;
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      std::vector<Value> args;
      Kwargs kwargs;
      STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, args, kwargs));
      auto r = ApplyFilter(e.name, v, args, kwargs);
      if (!r.ok()) return LineError(e.line, r.status().message());
      return r;
    }
    case Expr::Kind::kTest: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      std::vector<Value> args;
      Kwargs kwargs;
      STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, args, kwargs));
      auto r = ApplyTest(e.name, v, args);
      if (!r.ok()) return LineError(e.line, r.status().message());
      return Value::Bool(*r != e.negate);
    }
    case Expr::Kind::kUnary: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (!v.is_number()) {
        return LineError(e.line,
                         "unary '" + e.name + "' needs a number, not " + std::string(v.TypeName()));
      }
      if (e.name == "+") return v;
      return v.kind() == Value::Kind::kFloat ? Value::Float(-v.AsDouble()) : Value::Int(-v.i());
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case Expr::Kind::kCond: {
      STRATA_ASSIGN_OR_RETURN(Value c, Eval(*e.args[1]));
      if (c.Truthy()) return Eval(*e.args[0]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined("if-expression");
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
  }
  return InternalError("unknown expression");
}

Result<Value> Interpreter::GetItem(const Value& obj, const Value& idx) {
  if (obj.is_list() || obj.is_string()) {
    if (idx.kind() != Value::Kind::kInt && !idx.is_bool()) {
      if (idx.is_string() && obj.is_string() && HasMethod(obj, idx.s()))
        return Value::Undefined(idx.s());
      return Value::Undefined(idx.Str());
    }
    int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : Utf8Length(obj.s());
    int64_t k = idx.i() < 0 ? idx.i() + n : idx.i();
    if (k < 0 || k >= n) return Value::Undefined("[" + idx.Str() + "]");
    if (obj.is_list()) return obj.list()[static_cast<size_t>(k)];
    return Slice(obj, Value::Int(k), Value::Int(k + 1), Value::None());
  }
  if (obj.is_mapping()) {
    const Value* f = obj.Find(idx.Str());
    return f ? *f : Value::Undefined(idx.Str());
  }
  return Value::Undefined(idx.Str());
}

Status Interpreter::EvalArgs(const Expr& e, size_t first, std::vector<Value>& args,
                             Kwargs& kwargs) {
  size_t num_kw = e.kwarg_names.size();
  size_t num_pos = e.args.size() - first - num_kw;
  for (size_t k = first; k < e.args.size(); ++k) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
    if (k - first < num_pos) {
      args.push_back(std::move(v));
    } else {
      kwargs.emplace_back(e.kwarg_names[k - first - num_pos], std::move(v));
    }
  }
  return Status::Ok();
}

Result<Value> Interpreter::EvalCall(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0]));
  std::vector<Value> args;
  Kwargs kwargs;
  STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, args, kwargs));
  if (callee.kind() != Value::Kind::kFunction) {
    std::string what =
        e.args[0]->kind == Expr::Kind::kGetAttr
            ? "the method '" + e.args[0]->name + "'"
            : "'" +
                  (e.args[0]->kind == Expr::Kind::kName ? e.args[0]->name : std::string("value")) +
                  "'";
    if (e.args[0]->kind == Expr::Kind::kGetAttr) {
      return LineError(e.line, what +
                                   " is not supported in chat templates (strings: strip, lstrip, "
                                   "rstrip, startswith, endswith, split, upper, lower, title, "
                                   "capitalize, replace, find, count, join; dicts: items, keys, "
                                   "values, get)");
    }
    return LineError(e.line, what + " is " + std::string(callee.TypeName()) + ", not a function");
  }
  auto r = callee.fn()(args, kwargs);
  if (!r.ok()) {
    if (callee.fn_name() == "raise_exception") return r.status();
    return LineError(e.line, r.status().message());
  }
  return r;
}

Result<Value> Interpreter::EvalBinary(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  STRATA_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  const std::string& op = e.name;
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "~") return Value::Str(a.Str() + b.Str());
  if (op == "in" || op == "not in") {
    auto r = Contains(b, a);
    if (!r.ok()) return LineError(e.line, r.status().message());
    return Value::Bool(*r == (op == "in"));
  }
  if (a.is_undefined()) return UndefinedError(e.line, a);
  if (b.is_undefined()) return UndefinedError(e.line, b);
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    auto r = (op == "<" || op == ">=") ? Less(a, b) : Less(b, a);
    if (!r.ok()) return LineError(e.line, r.status().message());
    return Value::Bool((op == "<" || op == ">") ? *r : !*r);
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value::Str(a.s() + b.s());
  if (op == "+" && a.is_list() && b.is_list()) {
    List items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(items));
  }
  if (op == "*" && (a.is_string() || b.is_string()) &&
      (a.kind() == Value::Kind::kInt || b.kind() == Value::Kind::kInt)) {
    const Value& str = a.is_string() ? a : b;
    std::string out;
    for (int64_t k = 0; k < (a.is_string() ? b : a).i(); ++k) out += str.s();
    return Value::Str(out);
  }
  if (!a.is_number() || !b.is_number()) {
    return LineError(e.line, "'" + op + "' is not supported between " + std::string(a.TypeName()) +
                                 " and " + std::string(b.TypeName()));
  }
  bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  double x = a.AsDouble(), y = b.AsDouble();
  if (op == "+") return ints ? Value::Int(a.i() + b.i()) : Value::Float(x + y);
  if (op == "-") return ints ? Value::Int(a.i() - b.i()) : Value::Float(x - y);
  if (op == "*") return ints ? Value::Int(a.i() * b.i()) : Value::Float(x * y);
  if (op == "**") {
    if (ints && b.i() >= 0) {
      int64_t r = 1;
      for (int64_t k = 0; k < b.i(); ++k) r *= a.i();
      return Value::Int(r);
    }
    return Value::Float(std::pow(x, y));
  }
  if (y == 0) return LineError(e.line, "division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") {
    if (ints) {
      int64_t q = a.i() / b.i();
      if ((a.i() % b.i() != 0) && ((a.i() < 0) != (b.i() < 0))) --q;
      return Value::Int(q);
    }
    return Value::Float(std::floor(x / y));
  }
  if (op == "%") {
    if (ints) {
      int64_t r = a.i() % b.i();
      if (r != 0 && ((r < 0) != (b.i() < 0))) r += b.i();
      return Value::Int(r);
    }
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::Float(r);
  }
  return LineError(e.line, "unknown operator '" + op + "'");
}

}  // namespace strata::data::jinja::internal
