#include "nn/modules/lm/packed_layout.h"

#include <string>
#include <unordered_set>

namespace strata::nn {

namespace {
std::string Where(int64_t i, int64_t t) {
  return "row " + std::to_string(i / t) + ", token " + std::to_string(i % t);
}
}  // namespace

Status PackedLayout(const TokenBatch& batch, int64_t max_pos, std::vector<int32_t>* positions,
                    std::vector<int32_t>* row_start) {
  const int64_t t = batch.seq_len, n = batch.batch * batch.seq_len;
  const auto size_ok = [n](std::span<const int32_t> s) {
    return s.empty() || s.size() == static_cast<size_t>(n);
  };
  if (!size_ok(batch.position_ids) || !size_ok(batch.segment_ids)) {
    return InvalidArgumentError(
        "TokenBatch: position_ids has " + std::to_string(batch.position_ids.size()) +
        " and segment_ids " + std::to_string(batch.segment_ids.size()) +
        " entries; each must be empty or batch * seq_len = " + std::to_string(n));
  }
  positions->resize(static_cast<size_t>(n));
  row_start->assign(static_cast<size_t>(n), 0);
  std::unordered_set<int32_t> seen;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    int32_t start = 0;
    if (!batch.segment_ids.empty()) {
      if (i % t == 0) seen.clear();
      const int32_t seg = batch.segment_ids[u];
      if (i % t != 0 && seg == batch.segment_ids[u - 1]) {
        start = (*row_start)[u - 1];
      } else {
        if (!seen.insert(seg).second) {
          return InvalidArgumentError("TokenBatch: segment_ids at " + Where(i, t) + " is " +
                                      std::to_string(seg) +
                                      ", a segment that ended earlier in this row; a packed "
                                      "example must be one run of tokens");
        }
        start = static_cast<int32_t>(i % t);
      }
      (*row_start)[u] = start;
    }
    const int64_t pos = batch.position_ids.empty() ? i % t - start : int64_t{batch.position_ids[u]};
    if (pos < 0 || pos >= max_pos) {
      return InvalidArgumentError("TokenBatch: position " + std::to_string(pos) + " at " +
                                  Where(i, t) + " is outside [0, " + std::to_string(max_pos) + ")");
    }
    (*positions)[u] = static_cast<int32_t>(pos);
  }
  return Status::Ok();
}

}  // namespace strata::nn
