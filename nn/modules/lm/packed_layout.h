// PackedLayout: what a token batch's packing means for a model's forward - the rotary position
// of every token and, for each query, the first key its attention may see (the start of its
// packed example). A model calls it in Forward; a data pipeline that packs examples gives
// segment_ids (and optionally position_ids) in its TokenBatch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "nn/modules/lm/causal_lm.h"

namespace strata::nn {

// Fills positions[batch * seq] and row_start[batch * seq] (the index within its row of the first
// token of each token's example; all 0 without segment_ids). InvalidArgument, naming the token,
// when position_ids or segment_ids have the wrong size, a position is outside [0, max_pos), or a
// segment id appears again after another segment began in the same row (segments are runs).
Status PackedLayout(const TokenBatch& batch, int64_t max_pos, std::vector<int32_t>* positions,
                    std::vector<int32_t>* row_start);

}  // namespace strata::nn
