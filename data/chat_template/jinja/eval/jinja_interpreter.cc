// Renders a chat template (jinja_interpreter.h): name lookup through the scopes, the globals
// (range, namespace, dict, raise_exception, strftime_now) and the statements - output, if, for
// with its loop variable, set, macros, break/continue. Expressions are jinja_interpreter_expr.cc's.
#include "data/chat_template/jinja/eval/jinja_interpreter.h"

#include <ctime>
#include <unordered_map>

#include "data/chat_template/jinja/eval/jinja_builtins.h"
#include "data/chat_template/jinja/eval/jinja_interpreter_impl.h"

namespace strata::data::jinja {
namespace internal {

Status LineError(int line, const std::string& what) {
  return InvalidArgumentError("chat template line " + std::to_string(line) + ": " + what);
}

Value Interpreter::Lookup(const std::string& name) {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return Global(name);
}

Value Interpreter::Global(const std::string& name) {
  if (name == "range") {
    return Value::MakeFunction(name, [](std::vector<Value>& a, Kwargs&) -> Result<Value> {
      if (a.empty() || a.size() > 3) return InvalidArgumentError("range() takes 1 to 3 arguments");
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

Result<Flow> Interpreter::Exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    STRATA_ASSIGN_OR_RETURN(Flow f, ExecOne(*s, out));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Flow> Interpreter::ExecOne(const Stmt& s, std::string& out) {
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

Result<Value> Interpreter::CallMacro(const Stmt& m, std::vector<Value>& args, Kwargs& kwargs) {
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

Status Interpreter::Assign(const Stmt& s, Value v) {
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

Result<Flow> Interpreter::ExecFor(const Stmt& s, std::string& out) {
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
        {"nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::Undefined("nextitem")},
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

Status Interpreter::Bind(const Stmt& s, const Value& item) {
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

}  // namespace internal

Result<std::string> Render(const Body& body, const Dict& vars) {
  return internal::Interpreter(vars).Run(body);
}

}  // namespace strata::data::jinja
