// The chat template interpreter (jinja_interpreter.h), shared by jinja_interpreter.cc (names,
// globals and statements) and jinja_interpreter_expr.cc (expressions): the interpreter's scopes
// and how a statement tells its loop to break or continue. Private to those two files.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "data/chat_template/jinja/syntax/jinja_ast.h"
#include "data/chat_template/jinja/value/jinja_value.h"

namespace strata::data::jinja::internal {

enum class Flow { kNormal, kBreak, kContinue };

// InvalidArgument naming the template line.
Status LineError(int line, const std::string& what);

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

  // Names, globals and statements (jinja_interpreter.cc).
  Value Lookup(const std::string& name);
  Value Global(const std::string& name);
  Result<Flow> Exec(const Body& body, std::string& out);
  Result<Flow> ExecOne(const Stmt& s, std::string& out);
  Result<Value> CallMacro(const Stmt& m, std::vector<Value>& args, Kwargs& kwargs);
  Status Assign(const Stmt& s, Value v);
  Result<Flow> ExecFor(const Stmt& s, std::string& out);
  Status Bind(const Stmt& s, const Value& item);

  // Expressions (jinja_interpreter_expr.cc).
  Status UndefinedError(int line, const Value& v);
  Result<Value> Eval(const Expr& e);
  Result<Value> GetItem(const Value& obj, const Value& idx);
  Status EvalArgs(const Expr& e, size_t first, std::vector<Value>& args, Kwargs& kwargs);
  Result<Value> EvalCall(const Expr& e);
  Result<Value> EvalBinary(const Expr& e);

  std::vector<Scope> scopes_;
};

}  // namespace strata::data::jinja::internal
