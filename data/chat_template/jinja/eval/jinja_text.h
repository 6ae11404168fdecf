// Helpers the builtins (jinja_builtins.cc) and the filters (jinja_filters.cc) share: Python's
// str.strip/lower/upper/title/replace and Jinja's attribute paths ("a.b", "0").
#pragma once

#include <string>
#include <vector>

#include "data/chat_template/jinja/value/jinja_value.h"

namespace strata::data::jinja::internal {

bool IsPySpace(char c);
Status ArgError(const std::string& what, const std::string& msg);
// Positional argument k, else keyword `name`, else `fallback`.
Value Arg(std::vector<Value>& args, Kwargs& kwargs, size_t k, const char* name,
          Value fallback = Value());
// str.strip / lstrip / rstrip with `chars` (a string) or whitespace.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right);
std::string Lower(std::string s);
std::string Upper(std::string s);
std::string Title(const std::string& s);
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count);
// Jinja's environment.getitem along a dotted path ("a.b" or "0"); undefined where missing.
Value GetPath(const Value& v, const std::string& path);

}  // namespace strata::data::jinja::internal
