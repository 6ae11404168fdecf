// The top level of a DeepSpeed config: which keys Strata reads, which DeepSpeed keys it accepts
// without using (one note each; an error when the feature is on and would change the math), and
// what to say about anything else (a look-alike of a known key is an error, an unrelated key a
// warning, as DeepSpeed ignores unknown top-level keys).
#pragma once

#include <string_view>
#include <vector>

#include "engine/config/reader/section_reader.h"

namespace strata::internal {

// Top-level keys Strata reads itself.
const std::vector<std::string_view>& ImplementedTopLevelKeys();

// DeepSpeed top-level keys Strata does not implement: a note each, or an error when enabled and
// the math would differ.
void CheckUnimplementedDeepSpeedKeys(const Section& top);

// Keys in neither list. `extra_known` are keys accepted in this file for another reason (e.g.
// allgather_size with the old boolean zero_optimization).
void CheckUnknownTopLevelKeys(const Section& top, bool unknown_is_error,
                              const std::vector<std::string_view>& extra_known);

}  // namespace strata::internal
