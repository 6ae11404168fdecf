// Parser for chat templates: the expressions (jinja_parser_impl.h), loosest first - `a if c else
// b`, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary signs, filters `|` and tests
// `is`, attribute, subscript, slice and call, then names, literals, tuples, lists and dicts.
#include <initializer_list>
#include <string>
#include <utility>

#include "data/chat_template/jinja/syntax/jinja_parser_impl.h"

namespace strata::data::jinja::internal {

ExprPtr Parser::Make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

Result<ExprPtr> Parser::ParseTupleOrExpr() {
  int line = Peek().line;
  STRATA_ASSIGN_OR_RETURN(auto first, ParseExpr());
  if (!IsOp(",")) return first;
  auto tuple = Make(Expr::Kind::kTuple, line);
  tuple->args.push_back(std::move(first));
  while (IsOp(",")) {
    ++p_;
    if (IsOp(")") || Peek().kind == TK::kBlockEnd) break;  // (1,)
    STRATA_ASSIGN_OR_RETURN(auto next, ParseExpr());
    tuple->args.push_back(std::move(next));
  }
  return tuple;
}

Result<ExprPtr> Parser::ParseExpr() { return ParseOr(true); }

Result<ExprPtr> Parser::ParseOr(bool allow_cond) {
  int line = Peek().line;
  STRATA_ASSIGN_OR_RETURN(auto left, ParseAnd());
  while (IsName("or")) {
    ++p_;
    STRATA_ASSIGN_OR_RETURN(auto right, ParseAnd());
    auto e = Make(Expr::Kind::kOr, line);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  if (allow_cond && IsName("if")) {
    ++p_;
    auto e = Make(Expr::Kind::kCond, line);
    STRATA_ASSIGN_OR_RETURN(auto cond, ParseOr(false));
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(cond));
    if (IsName("else")) {
      ++p_;
      STRATA_ASSIGN_OR_RETURN(auto other, ParseOr(true));
      e->args.push_back(std::move(other));
    } else {
      e->args.push_back(nullptr);
    }
    return e;
  }
  return left;
}

Result<ExprPtr> Parser::ParseAnd() {
  int line = Peek().line;
  STRATA_ASSIGN_OR_RETURN(auto left, ParseNot());
  while (IsName("and")) {
    ++p_;
    STRATA_ASSIGN_OR_RETURN(auto right, ParseNot());
    auto e = Make(Expr::Kind::kAnd, line);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

Result<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    int line = Peek().line;
    ++p_;
    STRATA_ASSIGN_OR_RETURN(auto operand, ParseNot());
    auto e = Make(Expr::Kind::kUnary, line);
    e->name = "not";
    e->args.push_back(std::move(operand));
    return e;
  }
  return ParseCompare();
}

Result<ExprPtr> Parser::ParseCompare() {
  int line = Peek().line;
  STRATA_ASSIGN_OR_RETURN(auto left, ParseMath1());
  for (;;) {
    std::string op;
    if (Peek().kind == TK::kOp &&
        (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
         Peek().text == "<=" || Peek().text == ">=")) {
      op = Peek().text;
      ++p_;
    } else if (IsName("in")) {
      op = "in";
      ++p_;
    } else if (IsName("not") && IsName("in", 1)) {
      op = "not in";
      p_ += 2;
    } else {
      return left;
    }
    STRATA_ASSIGN_OR_RETURN(auto right, ParseMath1());
    auto e = Make(Expr::Kind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
}

Result<ExprPtr> Parser::ParseBinaryLevel(SubParser next, std::initializer_list<const char*> ops) {
  int line = Peek().line;
  STRATA_ASSIGN_OR_RETURN(auto left, (this->*next)());
  for (;;) {
    const char* found = nullptr;
    for (const char* op : ops) {
      if (IsOp(op)) found = op;
    }
    if (!found) return left;
    ++p_;
    STRATA_ASSIGN_OR_RETURN(auto right, (this->*next)());
    auto e = Make(Expr::Kind::kBinary, line);
    e->name = found;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
}

Result<ExprPtr> Parser::ParseMath1() { return ParseBinaryLevel(&Parser::ParseConcat, {"+", "-"}); }
Result<ExprPtr> Parser::ParseConcat() { return ParseBinaryLevel(&Parser::ParseMath2, {"~"}); }
Result<ExprPtr> Parser::ParseMath2() {
  return ParseBinaryLevel(&Parser::ParsePow, {"*", "/", "//", "%"});
}
Result<ExprPtr> Parser::ParsePow() { return ParseBinaryLevel(&Parser::ParseUnaryFiltered, {"**"}); }

Result<ExprPtr> Parser::ParseUnaryFiltered() { return ParseUnary(true); }

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  int line = Peek().line;
  ExprPtr e;
  if (IsOp("-") || IsOp("+")) {
    std::string op = t_[p_++].text;
    STRATA_ASSIGN_OR_RETURN(auto operand, ParseUnary(false));
    e = Make(Expr::Kind::kUnary, line);
    e->name = op;
    e->args.push_back(std::move(operand));
  } else {
    STRATA_ASSIGN_OR_RETURN(e, ParsePrimary());
  }
  STRATA_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
  if (!with_filter) return e;
  for (;;) {
    if (IsOp("|")) {
      ++p_;
      STRATA_ASSIGN_OR_RETURN(e, ParseFilterOrTest(std::move(e), Expr::Kind::kFilter));
      STRATA_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    } else if (IsName("is")) {
      ++p_;
      STRATA_ASSIGN_OR_RETURN(e, ParseFilterOrTest(std::move(e), Expr::Kind::kTest));
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::ParseFilterOrTest(ExprPtr operand, Expr::Kind kind) {
  auto e = Make(kind, Peek().line);
  if (kind == Expr::Kind::kTest && IsName("not")) {
    e->negate = true;
    ++p_;
  }
  std::string name;
  if (kind == Expr::Kind::kTest && Peek().kind == TK::kOp &&
      (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
       Peek().text == "<=" || Peek().text == ">=")) {
    name = t_[p_++].text;
  } else if (kind == Expr::Kind::kTest && (IsName("none") || IsName("true") || IsName("false"))) {
    name = t_[p_++].text;
  } else {
    STRATA_ASSIGN_OR_RETURN(name, ExpectName());
  }
  e->name = name;
  e->args.push_back(std::move(operand));
  if (IsOp("(")) {
    STRATA_RETURN_IF_ERROR(ParseCallArgs(*e));
  } else if (kind == Expr::Kind::kTest &&
             (Peek().kind == TK::kString || Peek().kind == TK::kInt || Peek().kind == TK::kFloat ||
              (Peek().kind == TK::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
               !IsName("if") && !IsName("in") && !IsName("is")))) {
    // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
    STRATA_ASSIGN_OR_RETURN(auto arg, ParseUnary(false));
    e->args.push_back(std::move(arg));
  }
  return e;
}

// Parses `(a, b, k=v)` into e.args (after what is already there) and e.kwarg_names.
Status Parser::ParseCallArgs(Expr& e) {
  STRATA_RETURN_IF_ERROR(Expect("("));
  while (!IsOp(")")) {
    if (Peek().kind == TK::kName && IsOp("=", 1)) {
      e.kwarg_names.push_back(t_[p_].text);
      p_ += 2;
    } else if (!e.kwarg_names.empty()) {
      return Error("a positional argument follows a keyword argument");
    } else if (IsOp("*") || IsOp("**")) {
      return Error("'*args' and '**kwargs' in calls are not supported");
    }
    STRATA_ASSIGN_OR_RETURN(auto arg, ParseExpr());
    e.args.push_back(std::move(arg));
    if (!IsOp(",")) break;
    ++p_;
  }
  return Expect(")");
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr e) {
  for (;;) {
    int line = Peek().line;
    if (IsOp(".")) {
      ++p_;
      auto g = Make(Expr::Kind::kGetAttr, line);
      if (Peek().kind == TK::kInt) {
        g->kind = Expr::Kind::kGetItem;
        auto idx = Make(Expr::Kind::kLiteral, line);
        idx->value = Value::Int(t_[p_++].int_value);
        g->args.push_back(std::move(e));
        g->args.push_back(std::move(idx));
      } else {
        STRATA_ASSIGN_OR_RETURN(g->name, ExpectName());
        g->args.push_back(std::move(e));
      }
      e = std::move(g);
    } else if (IsOp("[")) {
      ++p_;
      ExprPtr parts[3];
      bool slice = false;
      for (int k = 0; k < 3; ++k) {
        if (!IsOp(":") && !IsOp("]")) {
          STRATA_ASSIGN_OR_RETURN(parts[k], ParseExpr());
        }
        if (IsOp(":") && k < 2) {
          slice = true;
          ++p_;
          continue;
        }
        break;
      }
      STRATA_RETURN_IF_ERROR(Expect("]"));
      auto g = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
      g->args.push_back(std::move(e));
      if (slice) {
        for (auto& part : parts) g->args.push_back(std::move(part));
      } else {
        if (!parts[0]) return Error("an empty subscript '[]'");
        g->args.push_back(std::move(parts[0]));
      }
      e = std::move(g);
    } else if (IsOp("(")) {
      auto c = Make(Expr::Kind::kCall, line);
      c->args.push_back(std::move(e));
      STRATA_RETURN_IF_ERROR(ParseCallArgs(*c));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& tok = Peek();
  int line = tok.line;
  if (tok.kind == TK::kName) {
    ++p_;
    auto e = Make(Expr::Kind::kLiteral, line);
    if (tok.text == "true" || tok.text == "True") {
      e->value = Value::Bool(true);
    } else if (tok.text == "false" || tok.text == "False") {
      e->value = Value::Bool(false);
    } else if (tok.text == "none" || tok.text == "None") {
      e->value = Value::None();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = tok.text;
    }
    return e;
  }
  if (tok.kind == TK::kString) {
    std::string s;
    while (Peek().kind == TK::kString) s += t_[p_++].text;  // adjacent literals join
    auto e = Make(Expr::Kind::kLiteral, line);
    e->value = Value::Str(std::move(s));
    return e;
  }
  if (tok.kind == TK::kInt || tok.kind == TK::kFloat) {
    ++p_;
    auto e = Make(Expr::Kind::kLiteral, line);
    e->value = tok.kind == TK::kInt ? Value::Int(tok.int_value) : Value::Float(tok.float_value);
    return e;
  }
  if (IsOp("(")) {
    ++p_;
    if (IsOp(")")) {
      ++p_;
      return Make(Expr::Kind::kTuple, line);
    }
    STRATA_ASSIGN_OR_RETURN(auto inner, ParseTupleOrExpr());
    STRATA_RETURN_IF_ERROR(Expect(")"));
    return inner;
  }
  if (IsOp("[") || IsOp("{")) {
    bool is_list = IsOp("[");
    ++p_;
    auto e = Make(is_list ? Expr::Kind::kList : Expr::Kind::kDict, line);
    const char* close = is_list ? "]" : "}";
    while (!IsOp(close)) {
      STRATA_ASSIGN_OR_RETURN(auto item, ParseExpr());
      e->args.push_back(std::move(item));
      if (!is_list) {
        STRATA_RETURN_IF_ERROR(Expect(":"));
        STRATA_ASSIGN_OR_RETURN(auto val, ParseExpr());
        e->args.push_back(std::move(val));
      }
      if (!IsOp(",")) break;
      ++p_;
    }
    STRATA_RETURN_IF_ERROR(Expect(close));
    return e;
  }
  return Error("expected an expression, found " + Describe(tok));
}

}  // namespace strata::data::jinja::internal
