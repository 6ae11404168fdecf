// Helpers for reading DeepSpeed-style JSON config sections into typed structs with errors that
// name the key path and the allowed values. Unknown keys are an error with a "did you mean" hint.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata {

// Edit distance, for "did you mean" hints.
int EditDistance(std::string_view a, std::string_view b);

// Error if `section` (at JSON path `path`, e.g. "aio") is not an object or has a key outside
// `allowed`; the message names the key and suggests the closest allowed one.
Status CheckKnownKeys(const nlohmann::json& section, std::string_view path,
                      std::initializer_list<std::string_view> allowed);

// Typed reads of `section[key]`; `*out` is left unchanged when the key is absent or is "auto".
// Integers may be written as floats (5e8) if they are whole. Errors name "<path>.<key>".
Status ReadInt(const nlohmann::json& section, std::string_view path, const char* key,
               int64_t min_value, int64_t max_value, int64_t* out);
Status ReadBool(const nlohmann::json& section, std::string_view path, const char* key, bool* out);
Status ReadDouble(const nlohmann::json& section, std::string_view path, const char* key,
                  double* out);
// String restricted to `allowed` values.
Status ReadEnum(const nlohmann::json& section, std::string_view path, const char* key,
                std::initializer_list<std::string_view> allowed, std::string* out);

}  // namespace strata
