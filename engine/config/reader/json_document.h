// JsonDocument: a DeepSpeed config file parsed the way DeepSpeed reads it (hjson: `//`, `/* */`
// and `#` comments, trailing commas), with the line and column of every key so that each
// diagnostic can point into the file.
//
// Keys starting with `_` are comments by convention ("_comment": "...") and are dropped at any
// depth. A key given twice in one object is an error, as DeepSpeed's loader raises on it.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata {

using Json = nlohmann::ordered_json;

// 1-based; {0, 0} means "no position known".
struct SourcePos {
  int line = 0;
  int column = 0;
};

struct JsonDocument {
  Json root;
  // JSON path ("zero_optimization.offload_param.device", "optimizer.params.betas[1]") -> where
  // its key (object members) or its value (array elements, the root "") starts.
  std::map<std::string, SourcePos, std::less<>> positions;

  // The position of `path`, or of its nearest ancestor that has one.
  SourcePos Find(std::string_view path) const;
};

// "a" + "b" -> "a.b"; "" + "b" -> "b".
std::string JoinPath(std::string_view parent, std::string_view key);

// Parses `text`. On a syntax error: InvalidArgument "<source>:<line>:<column>: <what>" followed
// by the offending line and a caret under the column.
Result<JsonDocument> ParseJsonDocument(std::string_view text, std::string_view source_name);

}  // namespace strata
