// The filters, tests and methods (str.strip, dict.items, ...) chat templates call, each with
// Jinja2's / Python's behaviour. An unknown one is an error naming it.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "data/chat_template/jinja/value/jinja_value.h"

namespace strata::data::jinja {

// `value | name(args, kwargs)`.
Result<Value> ApplyFilter(const std::string& name, const Value& value, std::vector<Value>& args,
                          Kwargs& kwargs);
// `value is name(args)`.
Result<bool> ApplyTest(const std::string& name, const Value& value, std::vector<Value>& args);
// `object.name(args, kwargs)` for a string, list or dict.
Result<Value> CallMethod(const Value& object, const std::string& name, std::vector<Value>& args,
                         Kwargs& kwargs);
// Whether `object.name` is one of the methods CallMethod knows (so `x.strip` is not undefined).
bool HasMethod(const Value& object, const std::string& name);

// Python's `a < b` for numbers and strings; InvalidArgument for other types.
Result<bool> Less(const Value& a, const Value& b);
// Python's `a in b`.
Result<bool> Contains(const Value& container, const Value& item);
// Python's x[start:stop:step] for a list or a string (by code point).
Result<Value> Slice(const Value& v, const Value& start, const Value& stop, const Value& step);
// Items a for loop iterates: a list's items, a dict's keys, a string's characters.
Result<List> Iterate(const Value& v);

}  // namespace strata::data::jinja
