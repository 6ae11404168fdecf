// Parser for chat templates (jinja_parser.h): the statements - text, {{ output }}, if/elif/else,
// for/else, set and set blocks, macro, break/continue, generation - and Parse itself. The
// expressions are jinja_parser_expr.cc's.
#include "data/chat_template/jinja/syntax/jinja_parser.h"

#include <utility>

#include "data/chat_template/jinja/syntax/jinja_lexer.h"
#include "data/chat_template/jinja/syntax/jinja_parser_impl.h"

namespace strata::data::jinja {
namespace internal {

// Parses statements until a block tag whose keyword is in `ends` (consumed up to the keyword;
// the keyword is returned in `end`), or the end of the template when `ends` is empty.
Status Parser::ParseBody(Body& body, const std::vector<std::string>& ends, std::string& end) {
  for (;;) {
    const Token& tok = Peek();
    if (tok.kind == TK::kEof) {
      if (ends.empty()) return Status::Ok();
      return Error("the template ends inside a block: expected {% " + ends.back() + " %}");
    }
    if (tok.kind == TK::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->line = tok.line;
      s->text = tok.text;
      body.push_back(std::move(s));
      ++p_;
      continue;
    }
    if (tok.kind == TK::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = tok.line;
      ++p_;
      STRATA_ASSIGN_OR_RETURN(s->expr, ParseExpr());
      STRATA_RETURN_IF_ERROR(ExpectKind(TK::kVarEnd, "'}}'"));
      body.push_back(std::move(s));
      continue;
    }
    if (tok.kind != TK::kBlockBegin) return Error("unexpected " + Describe(tok));
    ++p_;
    if (Peek().kind != TK::kName)
      return Error("expected a statement keyword, found " + Describe(Peek()));
    std::string kw = Peek().text;
    for (const auto& e : ends) {
      if (kw == e) {
        ++p_;
        end = kw;
        return Status::Ok();
      }
    }
    STRATA_RETURN_IF_ERROR(ParseStatement(body));
  }
}

Status Parser::ParseStatement(Body& body) {
  int line = Peek().line;
  std::string kw = t_[p_++].text;
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (kw == "if") {
    s->kind = Stmt::Kind::kIf;
    std::string end = "elif";
    while (end == "elif") {
      STRATA_ASSIGN_OR_RETURN(auto cond, ParseExpr());
      STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
      s->conditions.push_back(std::move(cond));
      s->bodies.emplace_back();
      STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"elif", "else", "endif"}, end));
    }
    if (end == "else") {
      STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
      s->has_else = true;
      s->bodies.emplace_back();
      STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"endif"}, end));
    }
  } else if (kw == "for") {
    s->kind = Stmt::Kind::kFor;
    for (;;) {
      STRATA_ASSIGN_OR_RETURN(auto name, ExpectName());
      s->targets.push_back(name);
      if (!IsOp(",")) break;
      ++p_;
    }
    if (!IsName("in")) return Error("expected 'in' in the for loop, found " + Describe(Peek()));
    ++p_;
    STRATA_ASSIGN_OR_RETURN(s->expr, ParseOr(/*allow_cond=*/false));
    if (IsName("if")) {
      ++p_;
      STRATA_ASSIGN_OR_RETURN(s->filter, ParseExpr());
    }
    if (IsName("recursive")) return Error("'for ... recursive' is not supported");
    STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
    std::string end;
    s->bodies.emplace_back();
    STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"else", "endfor"}, end));
    if (end == "else") {
      STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
      s->has_else = true;
      s->bodies.emplace_back();
      STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"endfor"}, end));
    }
  } else if (kw == "set") {
    STRATA_ASSIGN_OR_RETURN(auto name, ExpectName());
    s->targets.push_back(name);
    if (IsOp(".")) {
      ++p_;
      STRATA_ASSIGN_OR_RETURN(auto attr, ExpectName());
      s->targets.push_back(attr);
    }
    if (IsOp(",")) return Error("'set' with several targets is not supported");
    if (IsOp("=")) {
      ++p_;
      s->kind = Stmt::Kind::kSet;
      STRATA_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpr());
    } else {
      s->kind = Stmt::Kind::kSetBlock;
      STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
      std::string end;
      s->bodies.emplace_back();
      STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"endset"}, end));
    }
  } else if (kw == "break" || kw == "continue") {
    s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
  } else if (kw == "macro") {
    s->kind = Stmt::Kind::kMacro;
    STRATA_ASSIGN_OR_RETURN(auto name, ExpectName());
    s->targets.push_back(name);
    STRATA_RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      STRATA_ASSIGN_OR_RETURN(auto param, ExpectName());
      s->params.push_back(param);
      ExprPtr def;
      if (IsOp("=")) {
        ++p_;
        STRATA_ASSIGN_OR_RETURN(def, ParseExpr());
      }
      s->defaults.push_back(std::move(def));
      if (!IsOp(",")) break;
      ++p_;
    }
    STRATA_RETURN_IF_ERROR(Expect(")"));
    STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
    std::string end;
    s->bodies.emplace_back();
    STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"endmacro"}, end));
  } else if (kw == "generation") {
    // transformers' AssistantTracker tag: renders its body unchanged.
    STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
    s->kind = Stmt::Kind::kIf;
    s->conditions.push_back(nullptr);
    s->bodies.emplace_back();
    std::string end;
    STRATA_RETURN_IF_ERROR(ParseBody(s->bodies.back(), {"endgeneration"}, end));
  } else {
    --p_;
    return Error("the statement '{% " + kw +
                 " %}' is not supported in chat templates (supported: if/elif/else, for, set, "
                 "macro, break, continue, generation)");
  }
  STRATA_RETURN_IF_ERROR(ExpectKind(TK::kBlockEnd, "'%}'"));
  body.push_back(std::move(s));
  return Status::Ok();
}

}  // namespace internal

Result<Body> Parse(std::string_view source) {
  STRATA_ASSIGN_OR_RETURN(auto tokens, Lex(source));
  return internal::Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace strata::data::jinja
