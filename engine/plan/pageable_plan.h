// The pageable CPU memory a training rank holds beyond the buffers memory_plan.cc places item by
// item: what the process itself holds once it runs (code pages, thread stacks, OpenBLAS's buffer,
// small objects), the host device's fp32 copies of 16-bit GEMM operands, what the engine keeps on
// the side during a step (the speculative overlapped step's copies), and what saving a checkpoint
// or exporting one stages — each in the phase of the run that holds it (PlanPhase), measured on
// this host (Note [Pageable terms] in pageable_plan.cc says how each was measured).
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "engine/plan/memory_plan.h"
#include "nn/modules/lm/footprint.h"

namespace strata {

struct PageableInputs {
  uint64_t offloaded_numel = 0;  // partition elements whose optimizer state is on the host
  uint64_t compute_bytes = 2;    // bytes of one compute-dtype element
  uint64_t largest_shard = 0;    // elements of the largest parameter shard
};

// The process's own pageable memory once the engine runs, measured (Note [Pageable terms]).
inline constexpr uint64_t kProcessPageableBytes = uint64_t{14} << 20;

// Appends the pageable items (each named with how it is sized) to `plan`.
void AddPageableItems(const ModelShape& model, const Config& config, const PageableInputs& in,
                      MemoryPlan* plan);

// What `strata train` adds after its steps: saving a checkpoint (--save) and exporting (--export).
struct SaveExportInputs {
  uint64_t num_params = 0;              // the model's parameters
  uint64_t largest_param = 0;           // elements of its largest parameter
  uint64_t partition_numel = 0;         // this rank's partition (the checkpoint shard's arrays)
  uint64_t largest_chunk = 0;           // elements of the largest swap chunk (NVMe optimizer state)
  uint64_t export_bytes = 2;            // bytes of one exported element (the run's compute dtype)
  bool save = false;                    // --save: a checkpoint is written
  bool export_from_checkpoint = false;  // --export with --save: from the saved checkpoint
  bool export_from_engine = false;      // --export without --save: from the engine's state
};
void AddSaveExportItems(const Config& config, const SaveExportInputs& in, MemoryPlan* plan);

}  // namespace strata
