#include "tests/aio/faulty_engine.h"

#include <algorithm>
#include <cerrno>
#include <vector>

namespace strata::testing {

bool FaultyEngine::Hit(int every) {
  if (every <= 0 || count_ % every != 0) return false;
  if (plan_.max_faults >= 0 && injected_ >= plan_.max_faults) return false;
  ++injected_;
  return true;
}

Result<int> FaultyEngine::Submit(std::span<const IoRequest> requests) {
  std::vector<IoRequest> pass;
  for (IoRequest r : requests) {
    if (plan_.only_reads && r.op != IoOp::kRead) {
      pass.push_back(r);
      continue;
    }
    ++count_;
    if (Hit(plan_.eio_every)) {
      synthetic_.push_back({r.user_data, -EIO});
      continue;
    }
    if (r.op == IoOp::kWrite && Hit(plan_.enospc_every)) {
      synthetic_.push_back({r.user_data, -ENOSPC});
      continue;
    }
    if (Hit(plan_.eagain_every)) {
      synthetic_.push_back({r.user_data, -EAGAIN});
      continue;
    }
    if (r.size_bytes > 4096 && Hit(plan_.short_every)) {
      r.size_bytes = std::max<uint32_t>(4096, r.size_bytes / 2 / 4096 * 4096);
    }
    pass.push_back(r);
  }
  if (!pass.empty()) {
    auto n = target().Submit(pass);
    if (!n.ok()) return n;
    target_inflight_ += *n;
    if (*n < static_cast<int>(pass.size())) return InternalError("faulty engine: partial submit");
  }
  return static_cast<int>(requests.size());
}

Result<int> FaultyEngine::Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) {
  int n = 0;
  while (n < static_cast<int>(out.size()) && !synthetic_.empty()) {
    out[static_cast<size_t>(n++)] = synthetic_.front();
    synthetic_.pop_front();
  }
  int want = std::min(std::max(0, min_complete - n), target_inflight_);
  if (n < static_cast<int>(out.size()) && (want > 0 || target_inflight_ > 0)) {
    auto m = target().Reap(out.subspan(static_cast<size_t>(n)), want, want > 0 ? timeout_us : 0);
    if (!m.ok()) return m;
    target_inflight_ -= *m;
    n += *m;
  }
  return n;
}

}  // namespace strata::testing
