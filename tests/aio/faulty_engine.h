// A fault-injecting IoEngine for tests: wraps a real engine and, on chosen requests, returns
// EIO / ENOSPC / EAGAIN without touching the disk, or performs a genuinely short transfer (the
// wrapped engine is asked for fewer bytes), so every error path of AioHandle runs for real. It
// can also break for good: every Reap after the Nth fails, as a broken ring's would.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <ostream>
#include <unordered_map>

#include "aio/engine/io_engine.h"

namespace strata {
// Readable parameter names in gtest/ctest output.
inline void PrintTo(IoEngineKind kind, std::ostream* os) { *os << IoEngineKindName(kind); }
}  // namespace strata

namespace strata::testing {

struct FaultPlan {
  // Every Nth submitted request (1-based count per engine) gets the fault; 0 = never.
  int eio_every = 0;
  int enospc_every = 0;  // writes only
  int eagain_every = 0;
  int short_every = 0;  // transfers half (rounded down to 4 KiB, at least 4 KiB shorter)
  // Like short_every, but reports 100 bytes fewer than were moved: the remainder is then not
  // O_DIRECT-aligned and must be finished with buffered I/O.
  int short_unaligned_every = 0;
  // Faults stop after this many were injected (-1: unlimited).
  int max_faults = -1;
  // Only reads are counted and faulted (writes pass untouched).
  bool only_reads = false;
  // Only writes are counted and faulted (reads pass untouched).
  bool only_writes = false;
  // When set, faults are injected only while it is true (tests arm it after a clean set-up).
  std::shared_ptr<std::atomic<bool>> armed;
  // A lasting reap error: every Reap call after this many (counted per engine, only while armed)
  // fails with EBADR, while the wrapped engine keeps its requests in flight. -1: never.
  int reap_error_after = -1;
};

class FaultyEngine final : public IoEngineWrapper {
 public:
  FaultyEngine(std::unique_ptr<IoEngine> target, FaultPlan plan)
      : IoEngineWrapper(std::move(target)), plan_(plan) {}

  Result<int> Submit(std::span<const IoRequest> requests) override;
  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override;

  int injected() const { return injected_; }

 private:
  bool Hit(int every);
  FaultPlan plan_;
  bool Armed() const { return plan_.armed == nullptr || plan_.armed->load(); }
  int count_ = 0;
  int injected_ = 0;
  int reaps_ = 0;
  int target_inflight_ = 0;
  std::deque<IoCompletion> synthetic_;
  std::unordered_map<uint64_t, int64_t> understate_;  // user_data -> bytes to hide
};

}  // namespace strata::testing
