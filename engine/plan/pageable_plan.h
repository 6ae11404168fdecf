// The pageable CPU memory a training rank holds beyond the buffers memory_plan.cc places item by
// item: what the engine keeps on the side during a step (the speculative overlapped step's copies),
// what saving a checkpoint or exporting stages, and what the process itself holds once it runs
// (thread stacks, the BLAS library's per-thread buffers, the allocator's per-thread arenas),
// measured on this host (Note [Pageable terms] in pageable_plan.cc says how each was measured).
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "engine/plan/memory_plan.h"
#include "nn/modules/footprint.h"

namespace strata {

struct PageableInputs {
  uint64_t offloaded_numel = 0;  // partition elements whose optimizer state is on the host
  uint64_t compute_bytes = 2;    // bytes of one compute-dtype element
  uint64_t largest_shard = 0;    // elements of the largest parameter shard
};

// Appends the pageable items (each named with how it is sized) to `plan`.
void AddPageableItems(const ModelShape& model, const Config& config, const PageableInputs& in,
                      MemoryPlan* plan);

}  // namespace strata
