#include "tests/aio/faulty_engine.h"

#include <algorithm>
#include <cerrno>
#include <vector>

namespace strata::testing {

bool FaultyEngine::Hit(int every) {
  if (!Armed()) return false;
  if (every <= 0 || count_ % every != 0) return false;
  if (plan_.max_faults >= 0 && injected_ >= plan_.max_faults) return false;
  ++injected_;
  return true;
}

// Keeps IoEngine's contract: the returned count is a prefix of `requests` that was taken
// (really, or as a synthetic fault); nothing past it is in flight.
Result<int> FaultyEngine::Submit(std::span<const IoRequest> requests) {
  std::vector<IoRequest> pass;
  std::vector<size_t> origin;  // index in `requests` of each pass[i]
  std::vector<std::pair<size_t, IoCompletion>> faults;
  std::vector<std::pair<uint64_t, int64_t>> understate;
  for (size_t k = 0; k < requests.size(); ++k) {
    IoRequest r = requests[k];
    if ((plan_.only_reads && r.op != IoOp::kRead) || (plan_.only_writes && r.op != IoOp::kWrite)) {
      pass.push_back(r);
      origin.push_back(k);
      continue;
    }
    ++count_;
    if (Hit(plan_.eio_every)) {
      faults.push_back({k, {r.user_data, -EIO}});
      continue;
    }
    if (r.op == IoOp::kWrite && Hit(plan_.enospc_every)) {
      faults.push_back({k, {r.user_data, -ENOSPC}});
      continue;
    }
    if (Hit(plan_.eagain_every)) {
      faults.push_back({k, {r.user_data, -EAGAIN}});
      continue;
    }
    if (r.size_bytes > 4096 && Hit(plan_.short_every)) {
      r.size_bytes = std::max<uint32_t>(4096, r.size_bytes / 2 / 4096 * 4096);
    } else if (r.size_bytes > 4096 && Hit(plan_.short_unaligned_every)) {
      r.size_bytes = std::max<uint32_t>(4096, r.size_bytes / 2 / 4096 * 4096);
      understate.push_back({r.user_data, 100});
    }
    pass.push_back(r);
    origin.push_back(k);
  }
  size_t cut = requests.size();
  if (!pass.empty()) {
    auto n = target().Submit(pass);
    const size_t accepted = n.ok() ? static_cast<size_t>(*n) : 0;
    target_inflight_ += static_cast<int>(accepted);
    if (accepted < pass.size()) {
      cut = origin[accepted];
      if (!n.ok() && cut == 0) return n.status();
    }
  }
  for (auto& [k, c] : faults) {
    if (k < cut) synthetic_.push_back(c);
  }
  for (size_t i = 0; i < pass.size() && origin[i] < cut; ++i) {
    for (auto& [ud, bytes] : understate) {
      if (ud == pass[i].user_data) understate_[ud] = bytes;
    }
  }
  return static_cast<int>(cut);
}

Result<int> FaultyEngine::Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) {
  if (plan_.reap_error_after >= 0 && Armed() && reaps_++ >= plan_.reap_error_after) {
    return ErrnoToStatus(EBADR, "io_uring_wait_cqes (injected: broken ring)");
  }
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
    for (int i = n; i < n + *m; ++i) {
      IoCompletion& c = out[static_cast<size_t>(i)];
      auto it = understate_.find(c.user_data);
      if (it == understate_.end()) continue;
      if (c.result > it->second) c.result -= it->second;
      understate_.erase(it);
    }
    n += *m;
  }
  return n;
}

}  // namespace strata::testing
