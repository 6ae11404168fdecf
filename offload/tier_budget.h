// TierBudget: bytes in use and peak per tier against configured limits.
//
// Every allocation the engine makes on a tier is reserved here first, so an over-limit request
// fails with OutOfMemory naming the tier (before any memory is touched), `strata-train` can print
// a per-tier memory table, and tests can assert peaks. Statistics follow c10's allocator stats:
// current, peak, allocation count, free count, OOM count. Thread-safe and lock-free.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "offload/tier.h"

namespace strata {

struct TierStats {
  uint64_t limit_bytes = 0;  // TierBudget::kUnlimited if none
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t alloc_count = 0;
  uint64_t free_count = 0;
  uint64_t oom_count = 0;
};

class TierBudget;

// Move-only RAII handle for one reservation; releases it on destruction.
class TierReservation {
 public:
  TierReservation() = default;
  TierReservation(TierReservation&& o) noexcept
      : budget_(std::exchange(o.budget_, nullptr)), tier_(o.tier_), bytes_(o.bytes_) {}
  TierReservation& operator=(TierReservation&& o) noexcept;
  TierReservation(const TierReservation&) = delete;
  TierReservation& operator=(const TierReservation&) = delete;
  ~TierReservation() { Reset(); }

  Tier tier() const { return tier_; }
  uint64_t bytes() const { return bytes_; }
  bool active() const { return budget_ != nullptr; }
  // Releases now (idempotent).
  void Reset();

 private:
  friend class TierBudget;
  TierReservation(TierBudget* budget, Tier tier, uint64_t bytes)
      : budget_(budget), tier_(tier), bytes_(bytes) {}
  TierBudget* budget_ = nullptr;
  Tier tier_ = Tier::kCpu;
  uint64_t bytes_ = 0;
};

class TierBudget {
 public:
  static constexpr uint64_t kUnlimited = UINT64_MAX;

  // All tiers unlimited (accounting only).
  TierBudget() = default;
  // limits[static_cast<int>(tier)]; kUnlimited for none.
  explicit TierBudget(const std::array<uint64_t, kNumTiers>& limits);
  TierBudget(const TierBudget&) = delete;
  TierBudget& operator=(const TierBudget&) = delete;

  // Counts `bytes` against `tier`. OutOfMemory if it would pass the limit:
  //   "out of memory on tier cpu: asked 3 GiB for <what>, free 1 GiB of 8 GiB limit (in use
  //    7 GiB, peak 7.5 GiB)". Nothing is counted on failure (except the OOM count).
  Status Reserve(Tier tier, uint64_t bytes, std::string_view what = {});
  // Undoes a Reserve. Releasing more than is in use is a broken invariant (STRATA_CHECK).
  void Release(Tier tier, uint64_t bytes);
  // Reserve with a handle that releases itself.
  Result<TierReservation> Acquire(Tier tier, uint64_t bytes, std::string_view what = {});

  // Changes a limit; it applies to later reservations (current use may exceed it).
  void SetLimit(Tier tier, uint64_t limit_bytes);
  TierStats Stats(Tier tier) const;
  // Sets each tier's peak to its current use (e.g. per step).
  void ResetPeaks();

  // A fixed-width table, one row per tier:
  //   tier    limit      in use     peak       allocs  frees  OOMs
  //   device  1 GiB      512 MiB    768 MiB        12     10     0
  std::string FormatTable() const;

 private:
  struct Counters {
    std::atomic<uint64_t> limit{kUnlimited};
    std::atomic<uint64_t> current{0};
    std::atomic<uint64_t> peak{0};
    std::atomic<uint64_t> allocs{0};
    std::atomic<uint64_t> frees{0};
    std::atomic<uint64_t> ooms{0};
  };
  Counters& At(Tier t) { return tiers_[static_cast<int>(t)]; }
  const Counters& At(Tier t) const { return tiers_[static_cast<int>(t)]; }

  std::array<Counters, kNumTiers> tiers_;
};

}  // namespace strata
