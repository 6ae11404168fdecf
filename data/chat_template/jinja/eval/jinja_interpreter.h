// Renders a parsed chat template (jinja_parser.h) with Jinja2's semantics as transformers
// configures it: undefined values print as nothing and are false, `set` inside a loop stays in
// the loop (namespace() carries values out), loop.index/first/last/..., break/continue, macros,
// and the globals range, namespace, dict, raise_exception and strftime_now.
#pragma once

#include <string>

#include "core/status.h"
#include "data/chat_template/jinja/syntax/jinja_ast.h"
#include "data/chat_template/jinja/value/jinja_value.h"

namespace strata::data::jinja {

// Renders `body` with the template variables `vars`. Errors name the template line: an
// undefined value used in arithmetic or as an object, a type error, an unsupported filter, test
// or method, or raise_exception("...") (InvalidArgument carrying the template's own message).
Result<std::string> Render(const Body& body, const Dict& vars);

}  // namespace strata::data::jinja
