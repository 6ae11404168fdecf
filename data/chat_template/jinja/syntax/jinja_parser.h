// Parser for chat templates: tokens (jinja_lexer.h) to a statement tree (jinja_ast.h), for the
// Jinja subset real chat templates use. Any other tag (extends, include, block, import, raw,
// with, call, filter blocks) is refused naming the construct and its line.
#pragma once

#include <string_view>

#include "core/status.h"
#include "data/chat_template/jinja/syntax/jinja_ast.h"

namespace strata::data::jinja {

Result<Body> Parse(std::string_view source);

}  // namespace strata::data::jinja
