// A run's memory as measured against its plan: the process's RSS baseline and peaks, the
// per-tier peaks of a run, the capacities it has, and the fit check before anything is placed.
// Used by `strata train` and the benchmarks that run the engine (bench/overlap, bench/scale).
//
// Measured peaks, per tier:
//   device        Device::MemoryStats().peak_bytes (the allocator's own peak);
//   pinned cpu    the run's TierBudget peak on the cpu tier (every PinnedPool the engine makes);
//   pageable cpu  RSS growth of the process since the baseline less the pinned and device bytes,
//                 at its largest: the larger of (a) VmHWM (reset through /proc/self/clear_refs)
//                 less the device peak when the device is the host-emulated one (its arena is
//                 process memory) and the pinned peak, and (b) with a PageableSampler, the
//                 largest of its samples, each RSS less the pinned bytes in use and the device
//                 peak at that moment. Both are lower bounds: (a) subtracts peaks that may come at
//                 other moments (Initialize's optimizer staging is pinned and freed before the
//                 steps), (b) misses what lives shorter than its period;
//   nvme          the TierBudget's nvme tier peak (swap files), 0 when nothing is swapped.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/status.h"
#include "engine/plan/memory_plan.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"

namespace strata {

// Process memory: resets the peak RSS (when the kernel lets us) and remembers the current RSS.
struct MemoryBaseline {
  uint64_t rss_bytes = 0;
  static MemoryBaseline Take();
};
// VmRSS / VmHWM of this process in bytes (0 if /proc is unreadable).
uint64_t CurrentRssBytes();
uint64_t PeakRssBytes();

// Fixes malloc's mmap threshold at glibc's default (128 KiB) so that its dynamic raise (to the
// largest block freed, up to 32 MiB) is off: a large buffer a phase of the run frees goes back to
// the system instead of staying in malloc's arenas, so the pageable tier holds what the plan's
// phases say (Note [Pageable terms] in engine/plan/pageable_plan.cc). For a program's main,
// before anything large is allocated.
void KeepLargeBlocksMapped();

// Samples the pageable tier on a thread of its own while a run goes on (see the header comment).
// Reads /proc/self/statm, the budget's and the device's counters: a few microseconds a sample.
class PageableSampler {
 public:
  static constexpr std::chrono::milliseconds kPeriod{5};
  // `device` and `budget` must outlive the sampler.
  PageableSampler(const Device& device, const TierBudget& budget, const MemoryBaseline& baseline);
  ~PageableSampler();  // stops the thread
  PageableSampler(const PageableSampler&) = delete;
  PageableSampler& operator=(const PageableSampler&) = delete;
  // The largest sample so far (one taken now included).
  uint64_t peak_bytes();

 private:
  void Sample();
  const Device& device_;
  const TierBudget& budget_;
  const MemoryBaseline baseline_;
  std::atomic<uint64_t> peak_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

// Measured per-tier peaks of a run (see the header comment for what each is); `sampler` may be
// null.
TierBytes MeasuredPeaks(const Device& device, const TierBudget& budget,
                        const MemoryBaseline& baseline, PageableSampler* sampler = nullptr);

// Capacities the run has: the device's capacity, the budget's cpu limit (0 when unlimited).
TierBytes RunCapacities(const Device& device, const TierBudget& budget);

// The fit check before the engine places anything: Ok, or OutOfMemory with one line ("... does
// not fit ...: tier device needs X, capacity Y; the per-tier table is above") after printing the
// per-tier table and the items it needed to stderr. Capacities are RunCapacities().
Status CheckTrainRunFits(const MemoryPlan& plan, const Device& device, const TierBudget& budget);

}  // namespace strata
