// The chat template parser (jinja_parser.h), shared by jinja_parser.cc (the statements) and
// jinja_parser_expr.cc (the expressions): the parser's state, its token cursor and its error
// messages. Private to those two files.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/chat_template/jinja/syntax/jinja_ast.h"
#include "data/chat_template/jinja/syntax/jinja_lexer.h"

namespace strata::data::jinja::internal {

using TK = Token::Kind;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> ParseTemplate() {
    Body body;
    std::string end;
    STRATA_RETURN_IF_ERROR(ParseBody(body, {}, end));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == TK::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == TK::kName && Peek(ahead).text == name;
  }
  Status Error(const std::string& what) const {
    return InvalidArgumentError("chat template line " + std::to_string(Peek().line) + ": " + what);
  }
  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case TK::kEof:
        return "the end of the template";
      case TK::kBlockEnd:
        return "'%}'";
      case TK::kVarEnd:
        return "'}}'";
      case TK::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }
  Status Expect(const char* op) {
    if (!IsOp(op)) return Error(std::string("expected '") + op + "', found " + Describe(Peek()));
    ++p_;
    return Status::Ok();
  }
  Status ExpectKind(TK kind, const char* what) {
    if (Peek().kind != kind)
      return Error(std::string("expected ") + what + ", found " + Describe(Peek()));
    ++p_;
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != TK::kName) return Error("expected a name, found " + Describe(Peek()));
    return t_[p_++].text;
  }

  // The statements (jinja_parser.cc).
  Status ParseBody(Body& body, const std::vector<std::string>& ends, std::string& end);
  Status ParseStatement(Body& body);

  // The expressions (jinja_parser_expr.cc), the lowest precedence first.
  ExprPtr Make(Expr::Kind kind, int line);
  Result<ExprPtr> ParseTupleOrExpr();
  Result<ExprPtr> ParseExpr();
  Result<ExprPtr> ParseOr(bool allow_cond);
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  using SubParser = Result<ExprPtr> (Parser::*)();
  Result<ExprPtr> ParseBinaryLevel(SubParser next, std::initializer_list<const char*> ops);
  Result<ExprPtr> ParseMath1();
  Result<ExprPtr> ParseConcat();
  Result<ExprPtr> ParseMath2();
  Result<ExprPtr> ParsePow();
  Result<ExprPtr> ParseUnaryFiltered();
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParseFilterOrTest(ExprPtr operand, Expr::Kind kind);
  Status ParseCallArgs(Expr& e);
  Result<ExprPtr> ParsePostfix(ExprPtr e);
  Result<ExprPtr> ParsePrimary();

  std::vector<Token> t_;
  size_t p_ = 0;
};

}  // namespace strata::data::jinja::internal
