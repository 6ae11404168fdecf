// The training text the project ships (models/data/text/shakespeare.txt), built into the strata
// program by cmake/EmbedText.cmake so `strata train` without --data needs no file at run time,
// however strata was built or installed.
#pragma once

#include <string_view>

namespace strata::cli {

// The text's bytes (byte-level tokens, vocabulary 256).
extern const std::string_view kShippedText;

// The name it goes by in messages and the run's output.
inline constexpr std::string_view kShippedTextName =
    "models/data/text/shakespeare.txt (built into strata)";

}  // namespace strata::cli
