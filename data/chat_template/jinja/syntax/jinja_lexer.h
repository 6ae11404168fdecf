// Lexer for chat templates: splits Jinja source into text and tag tokens with the whitespace
// rules transformers renders with (trim_blocks, lstrip_blocks, `-`/`+` markers, one trailing
// newline dropped: Jinja2's keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::data::jinja {

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Kind kind = Kind::kEof;
  std::string text;  // text, name, decoded string literal or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// InvalidArgument naming the line for an unterminated tag, string or comment, or a character
// that starts no token.
Result<std::vector<Token>> Lex(std::string_view source);

}  // namespace strata::data::jinja
