#include "data/chat_template/jinja_interpreter.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "data/chat_template/jinja_builtins.h"

namespace strata::data::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

Status LineError(int line, const std::string& what) {
  return InvalidArgumentError("chat template line " + std::to_string(line) + ": " + what);
}

class Interpreter {
 public:
  explicit Interpreter(const Dict& vars) {
    scopes_.emplace_back();
    for (const auto& [k, v] : vars) scopes_.back()[k] = v;
  }

  Result<std::string> Run(const Body& body) {
    std::string out;
    STRATA_ASSIGN_OR_RETURN(Flow f, Exec(body, out));
    (void)f;
    return out;
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Value Lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Global(name);
  }

  Value Global(const std::string& name) {
    if (name == "range") {
      return Value::MakeFunction(name, [](std::vector<Value>& a, Kwargs&) -> Result<Value> {
        if (a.empty() || a.size() > 3)
          return InvalidArgumentError("range() takes 1 to 3 arguments");
        int64_t start = a.size() > 1 ? a[0].i() : 0, stop = a.size() > 1 ? a[1].i() : a[0].i();
        int64_t step = a.size() > 2 ? a[2].i() : 1;
        if (step == 0) return InvalidArgumentError("range() step must not be zero");
        List out;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
          out.push_back(Value::Int(k));
        return Value::MakeList(std::move(out));
      });
    }
    if (name == "namespace" || name == "dict") {
      bool ns = name == "namespace";
      return Value::MakeFunction(name, [ns](std::vector<Value>& a, Kwargs& kw) -> Result<Value> {
        Dict items;
        for (const auto& arg : a) {
          if (!arg.is_mapping())
            return InvalidArgumentError("namespace()/dict() take a dict or key=value");
          for (const auto& kv : arg.dict()) items.push_back(kv);
        }
        for (auto& kv : kw) items.push_back(kv);
        return ns ? Value::MakeNamespace(std::move(items)) : Value::MakeDict(std::move(items));
      });
    }
    if (name == "raise_exception") {
      return Value::MakeFunction(name, [](std::vector<Value>& a, Kwargs&) -> Result<Value> {
        return InvalidArgumentError("the chat template raised an error: " +
                                    (a.empty() ? std::string() : a[0].Str()));
      });
    }
    if (name == "strftime_now") {
      return Value::MakeFunction(name, [](std::vector<Value>& a, Kwargs&) -> Result<Value> {
        if (a.empty() || !a[0].is_string())
          return InvalidArgumentError("strftime_now(format) needs a format string");
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        size_t n = std::strftime(buf, sizeof(buf), a[0].s().c_str(), &tm);
        return Value::Str(std::string(buf, n));
      });
    }
    return Value::Undefined(name);
  }

  Result<Flow> Exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
      STRATA_ASSIGN_OR_RETURN(Flow f, ExecOne(*s, out));
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Result<Flow> ExecOne(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        out += v.Str();
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t k = 0; k < s.bodies.size(); ++k) {
          bool take = true;
          if (k < s.conditions.size() && s.conditions[k]) {
            STRATA_ASSIGN_OR_RETURN(Value c, Eval(*s.conditions[k]));
            take = c.Truthy();
          }
          if (take) return Exec(s.bodies[k], out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return ExecFor(s, out);
      case Stmt::Kind::kSet: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        STRATA_RETURN_IF_ERROR(Assign(s, std::move(v)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string text;
        STRATA_ASSIGN_OR_RETURN(Flow f, Exec(s.bodies[0], text));
        (void)f;
        STRATA_RETURN_IF_ERROR(Assign(s, Value::Str(std::move(text))));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        scopes_.back()[s.targets[0]] = Value::MakeFunction(
            s.targets[0], [this, macro](std::vector<Value>& a, Kwargs& kw) -> Result<Value> {
              return CallMacro(*macro, a, kw);
            });
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  Result<Value> CallMacro(const Stmt& m, std::vector<Value>& args, Kwargs& kwargs) {
    if (args.size() > m.params.size()) {
      return LineError(m.line, "macro '" + m.targets[0] + "' takes " +
                                   std::to_string(m.params.size()) + " arguments");
    }
    Scope scope;
    for (size_t k = 0; k < m.params.size(); ++k) {
      Value v = Value::Undefined(m.params[k]);
      if (k < args.size()) {
        v = args[k];
      } else if (m.defaults[k]) {
        STRATA_ASSIGN_OR_RETURN(v, Eval(*m.defaults[k]));
      }
      for (auto& [name, val] : kwargs) {
        if (name == m.params[k]) v = val;
      }
      scope[m.params[k]] = v;
    }
    scopes_.push_back(std::move(scope));
    std::string text;
    auto r = Exec(m.bodies[0], text);
    scopes_.pop_back();
    if (!r.ok()) return r.status();
    return Value::Str(std::move(text));
  }

  Status Assign(const Stmt& s, Value v) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = std::move(v);
      return Status::Ok();
    }
    Value ns = Lookup(s.targets[0]);
    if (ns.kind() != Value::Kind::kNamespace) {
      return LineError(s.line, "'set " + s.targets[0] + "." + s.targets[1] +
                                   "': only a namespace() takes attribute assignment, '" +
                                   s.targets[0] + "' is " + std::string(ns.TypeName()));
    }
    for (auto& kv : ns.dict()) {
      if (kv.first == s.targets[1]) {
        kv.second = std::move(v);
        return Status::Ok();
      }
    }
    ns.dict().emplace_back(s.targets[1], std::move(v));
    return Status::Ok();
  }

  Result<Flow> ExecFor(const Stmt& s, std::string& out) {
    STRATA_ASSIGN_OR_RETURN(Value seq, Eval(*s.expr));
    auto all = Iterate(seq);
    if (!all.ok()) return LineError(s.line, "for loop: " + all.status().message());
    List items;
    for (auto& item : *all) {
      if (s.filter) {
        scopes_.emplace_back();
        Status st = Bind(s, item);
        auto keep = st.ok() ? Eval(*s.filter) : Result<Value>(st);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (!keep->Truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) {
      if (s.has_else) return Exec(s.bodies[1], out);
      return Flow::kNormal;
    }
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      scopes_.emplace_back();
      STRATA_RETURN_IF_ERROR(Bind(s, items[static_cast<size_t>(k)]));
      Dict loop = {
          {"index", Value::Int(k + 1)},
          {"index0", Value::Int(k)},
          {"revindex", Value::Int(n - k)},
          {"revindex0", Value::Int(n - k - 1)},
          {"first", Value::Bool(k == 0)},
          {"last", Value::Bool(k == n - 1)},
          {"length", Value::Int(n)},
          {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)},
          {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::Undefined("previtem")},
          {"nextitem",
           k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::Undefined("nextitem")},
          {"cycle",
           Value::MakeFunction("cycle", [k](std::vector<Value>& a, Kwargs&) -> Result<Value> {
             if (a.empty()) return InvalidArgumentError("loop.cycle() needs at least one value");
             return a[static_cast<size_t>(k) % a.size()];
           })}};
      scopes_.back()["loop"] = Value::MakeDict(std::move(loop));
      auto f = Exec(s.bodies[0], out);
      scopes_.pop_back();
      if (!f.ok()) return f.status();
      if (*f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Status Bind(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = item;
      return Status::Ok();
    }
    STRATA_ASSIGN_OR_RETURN(List parts, Iterate(item));
    if (parts.size() != s.targets.size()) {
      return LineError(s.line, "for loop: cannot unpack " + std::to_string(parts.size()) +
                                   " values into " + std::to_string(s.targets.size()) + " names");
    }
    for (size_t k = 0; k < parts.size(); ++k) scopes_.back()[s.targets[k]] = parts[k];
    return Status::Ok();
  }

  Status UndefinedError(int line, const Value& v) {
    return LineError(line, "'" + v.undefined_name() + "' is undefined");
  }

  Result<Value> Eval(const Expr& e) {
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
          return LineError(
              e.line, "unary '" + e.name + "' needs a number, not " + std::string(v.TypeName()));
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

  Result<Value> GetItem(const Value& obj, const Value& idx) {
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

  Status EvalArgs(const Expr& e, size_t first, std::vector<Value>& args, Kwargs& kwargs) {
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

  Result<Value> EvalCall(const Expr& e) {
    STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0]));
    std::vector<Value> args;
    Kwargs kwargs;
    STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, args, kwargs));
    if (callee.kind() != Value::Kind::kFunction) {
      std::string what = e.args[0]->kind == Expr::Kind::kGetAttr
                             ? "the method '" + e.args[0]->name + "'"
                             : "'" +
                                   (e.args[0]->kind == Expr::Kind::kName ? e.args[0]->name
                                                                         : std::string("value")) +
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

  Result<Value> EvalBinary(const Expr& e) {
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
      return LineError(e.line, "'" + op + "' is not supported between " +
                                   std::string(a.TypeName()) + " and " + std::string(b.TypeName()));
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

  std::vector<Scope> scopes_;
};

}  // namespace

Result<std::string> Render(const Body& body, const Dict& vars) {
  return Interpreter(vars).Run(body);
}

}  // namespace strata::data::jinja
