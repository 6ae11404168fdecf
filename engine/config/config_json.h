// The resolved config as JSON (every key present, no "auto" left, DeepSpeed's key names) and the
// human view `strata config check` prints (each value with where it came from).
#pragma once

#include <string>

#include "engine/config/config.h"

namespace strata {

// Resolved values; keys the run must still fill in (e.g. total_num_steps "auto" in a check
// without --total-steps) are null.
Json ConfigToJson(const Config& config);

// One line per resolved key: "path = value  (origin)", then warnings and notes, then errors.
std::string FormatConfigView(const Config& config);

}  // namespace strata
