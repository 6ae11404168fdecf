// The syntax tree of a parsed chat template: expressions and statements, each with its source
// line so a render error names where it happened.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/chat_template/jinja/value/jinja_value.h"

namespace strata::data::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kTuple,    // args
    kDict,     // args: key, value, key, value...
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null args for omitted parts)
    kCall,     // args[0](args[1..]; kwarg_names for the last kwarg_names.size() args)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not: negate] name(args[1..])
    kUnary,    // op args[0]: "-", "+", "not"
    kBinary,   // args[0] op args[1]: + - * / // % ** ~ == != < > <= >= in "not in"
    kAnd,
    kOr,
    kCond,  // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  std::string name;  // name, attribute, filter, test or operator
  bool negate = false;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::string> kwarg_names;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kMacro };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;                 // kText
  ExprPtr expr;                     // kOutput, kSet value, kFor iterable
  std::vector<ExprPtr> conditions;  // kIf: one per branch
  std::vector<Body> bodies;         // kIf: one per branch (+ else); kFor: body (+ else)
  bool has_else = false;
  std::vector<std::string> targets;  // kFor loop variables; kSet/kSetBlock: name [, attr]
  ExprPtr filter;                    // kFor `if` filter
  std::vector<std::string> params;   // kMacro parameter names
  std::vector<ExprPtr> defaults;     // kMacro defaults (null where none)
};

}  // namespace strata::data::jinja
