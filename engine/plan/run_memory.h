// A run's memory as measured against its plan: the process's RSS baseline and peaks, the
// per-tier peaks of a run, the capacities it has, and the fit check before anything is placed.
// Used by `strata train` and the benchmarks that run the engine (bench/overlap, bench/scale).
//
// Measured peaks, per tier:
//   device        Device::MemoryStats().peak_bytes (the allocator's own peak);
//   pinned cpu    the run's TierBudget peak on the cpu tier (every PinnedPool the engine makes);
//   pageable cpu  peak RSS growth of the process since the baseline (VmHWM after resetting it
//                 through /proc/self/clear_refs), minus the device peak when the device is the
//                 host-emulated one (its arena is process memory) and minus the pinned peak:
//                 an approximation that also counts the BLAS and thread stacks;
//   nvme          the TierBudget's nvme tier peak (swap files), 0 when nothing is swapped.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/plan/memory_plan.h"
#include "offload/device/device.h"
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

// Measured per-tier peaks of a run (see the header comment for what each is).
TierBytes MeasuredPeaks(const Device& device, const TierBudget& budget,
                        const MemoryBaseline& baseline);

// Capacities the run has: the device's capacity, the budget's cpu limit (0 when unlimited).
TierBytes RunCapacities(const Device& device, const TierBudget& budget);

// The fit check before the engine places anything: Ok, or OutOfMemory with one line ("... does
// not fit ...: tier device needs X, capacity Y; the per-tier table is above") after printing the
// per-tier table and the items it needed to stderr. Capacities are RunCapacities().
Status CheckTrainRunFits(const MemoryPlan& plan, const Device& device, const TierBudget& budget);

}  // namespace strata
