// Reading tokenizer.json nodes with errors that name the JSON path ("pre_tokenizer.
// pretokenizers[0].behavior: 'Contiguous' is not supported (supported: Isolated, Removed, ...)").
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizers/text/regex.h"

namespace strata::tokenizers::internal {

using Json = nlohmann::json;

std::string JoinPath(std::string_view path, std::string_view key);
std::string IndexPath(std::string_view path, size_t index);

// `node[key]` as a string / bool / integer / array; `def` when absent or null (if given), else an
// error naming "<path>.<key>".
Result<std::string> GetString(const Json& node, std::string_view path, const char* key,
                              std::optional<std::string> def = std::nullopt);
Result<bool> GetBool(const Json& node, std::string_view path, const char* key,
                     std::optional<bool> def = std::nullopt);
Result<int64_t> GetInt(const Json& node, std::string_view path, const char* key,
                       std::optional<int64_t> def = std::nullopt);
Result<const Json*> GetArray(const Json& node, std::string_view path, const char* key);

// The component's "type", which must be one of `supported`; the error lists them.
Result<std::string> GetType(const Json& node, std::string_view path,
                            std::initializer_list<std::string_view> supported);
// A value outside what Strata implements: "<path>: <what> is not supported (<allowed>)".
Status Unsupported(std::string_view path, std::string_view what, std::string_view allowed);

// A {"String": s} or {"Regex": r} pattern at node[key].
Result<Regex> GetPattern(const Json& node, std::string_view path, const char* key);
// The single character a decoder/normalizer option holds (e.g. Metaspace's "replacement").
Result<std::string> GetChar(const Json& node, std::string_view path, const char* key,
                            std::optional<std::string> def = std::nullopt);

}  // namespace strata::tokenizers::internal
