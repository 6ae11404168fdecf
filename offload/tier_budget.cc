#include "offload/tier_budget.h"

#include <cstdio>

#include "core/units.h"

namespace strata {

TierReservation& TierReservation::operator=(TierReservation&& o) noexcept {
  if (this != &o) {
    Reset();
    budget_ = std::exchange(o.budget_, nullptr);
    tier_ = o.tier_;
    bytes_ = o.bytes_;
  }
  return *this;
}

void TierReservation::Reset() {
  if (budget_ != nullptr) std::exchange(budget_, nullptr)->Release(tier_, bytes_);
}

TierBudget::TierBudget(const std::array<uint64_t, kNumTiers>& limits) {
  for (int i = 0; i < kNumTiers; ++i) tiers_[i].limit.store(limits[i]);
}

Status TierBudget::Reserve(Tier tier, uint64_t bytes, std::string_view what) {
  Counters& c = At(tier);
  const uint64_t limit = c.limit.load(std::memory_order_relaxed);
  uint64_t cur = c.current.load(std::memory_order_relaxed);
  do {
    if (cur > limit || bytes > limit - cur) {
      c.ooms.fetch_add(1, std::memory_order_relaxed);
      const uint64_t free_bytes = cur > limit ? 0 : limit - cur;
      std::string msg =
          "out of memory on tier " + std::string(TierName(tier)) + ": asked " + FormatBytes(bytes);
      if (!what.empty()) msg += " for " + std::string(what);
      msg += ", free " + FormatBytes(free_bytes) + " of " + FormatBytes(limit) + " limit (in use " +
             FormatBytes(cur) + ", peak " + FormatBytes(c.peak.load(std::memory_order_relaxed)) +
             ")";
      return OutOfMemoryError(std::move(msg));
    }
  } while (!c.current.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  const uint64_t now = cur + bytes;
  uint64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  c.allocs.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void TierBudget::Release(Tier tier, uint64_t bytes) {
  Counters& c = At(tier);
  const uint64_t before = c.current.fetch_sub(bytes, std::memory_order_relaxed);
  STRATA_CHECK_MSG(before >= bytes, "TierBudget::Release of more bytes than reserved on tier " +
                                        std::string(TierName(tier)));
  c.frees.fetch_add(1, std::memory_order_relaxed);
}

Result<TierReservation> TierBudget::Acquire(Tier tier, uint64_t bytes, std::string_view what) {
  STRATA_RETURN_IF_ERROR(Reserve(tier, bytes, what));
  return TierReservation(this, tier, bytes);
}

void TierBudget::SetLimit(Tier tier, uint64_t limit_bytes) {
  At(tier).limit.store(limit_bytes, std::memory_order_relaxed);
}

TierStats TierBudget::Stats(Tier tier) const {
  const Counters& c = At(tier);
  TierStats s;
  s.limit_bytes = c.limit.load(std::memory_order_relaxed);
  s.current_bytes = c.current.load(std::memory_order_relaxed);
  s.peak_bytes = c.peak.load(std::memory_order_relaxed);
  s.alloc_count = c.allocs.load(std::memory_order_relaxed);
  s.free_count = c.frees.load(std::memory_order_relaxed);
  s.oom_count = c.ooms.load(std::memory_order_relaxed);
  return s;
}

void TierBudget::ResetPeaks() {
  for (Counters& c : tiers_) c.peak.store(c.current.load(std::memory_order_relaxed));
}

std::string TierBudget::FormatTable() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-7s %-11s %-11s %-11s %8s %8s %6s\n", "tier", "limit",
                "in use", "peak", "allocs", "frees", "OOMs");
  out += line;
  for (Tier t : kAllTiers) {
    const TierStats s = Stats(t);
    const std::string limit =
        s.limit_bytes == kUnlimited ? "unlimited" : FormatBytes(s.limit_bytes);
    std::snprintf(line, sizeof(line), "%-7s %-11s %-11s %-11s %8llu %8llu %6llu\n",
                  std::string(TierName(t)).c_str(), limit.c_str(),
                  FormatBytes(s.current_bytes).c_str(), FormatBytes(s.peak_bytes).c_str(),
                  static_cast<unsigned long long>(s.alloc_count),
                  static_cast<unsigned long long>(s.free_count),
                  static_cast<unsigned long long>(s.oom_count));
    out += line;
  }
  return out;
}

}  // namespace strata
