// StepBreakdown: where one training step's time went and how many bytes it moved between tiers —
// what `steps_per_print` shows (issue #15 "Observability"). Each part of the engine adds what it
// measured (the NVMe optimizer its read wait, Adam time and NVMe bytes; the engine forward,
// backward, copies and collectives); parts may overlap in time, so they need not sum to total_ms.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

struct StepBreakdown {
  // Wall time of phases, milliseconds.
  double total_ms = 0;     // the whole step, forward of the first micro-batch to write-back
  double forward_ms = 0;   // all micro-batches
  double backward_ms = 0;  // all micro-batches
  double step_ms = 0;      // the optimizer step: unscale, norm, update, write-back
  // Time spent waiting (the part not hidden behind other work).
  double io_wait_ms = 0;      // waiting for NVMe reads/writes
  double h2d_ms = 0;          // host -> device copies waited for
  double d2h_ms = 0;          // device -> host copies waited for
  double collectives_ms = 0;  // all-gather / reduce-scatter / all-reduce waited for
  // Compute.
  double cpu_adam_ms = 0;  // in the CPU optimizer kernel
  // strata.overlap_step: the CPU optimizer's time on sub-groups updated during backward (hidden
  // behind it; not part of cpu_adam_ms).
  double overlapped_adam_ms = 0;

  // Bytes moved per tier boundary.
  uint64_t h2d_bytes = 0;
  // Of h2d_bytes, those enqueued during the forwards (stage 3's gathers): the link's forward
  // phase, which no gradient copy can share (bench/overlap's phase floor).
  uint64_t forward_h2d_bytes = 0;
  uint64_t d2h_bytes = 0;
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_write_bytes = 0;
  // Of nvme_read_bytes / nvme_write_bytes, the NVMe gradient region's (strata.nvme_grad_chunk:
  // engine/nvme/grad_region.h); the rest of the optimizer's are its state's.
  uint64_t grad_region_read_bytes = 0;
  uint64_t grad_region_write_bytes = 0;
  uint64_t collective_bytes = 0;  // this rank's send volume

  // Field-wise sum (several steps, or parts measured apart).
  StepBreakdown& operator+=(const StepBreakdown& o);
  // One line: "step 812.4 ms: fwd 201.0, bwd 402.2, step 209.2 (adam 150.1, io wait 20.3), h2d
  // 1.2, d2h 0.8, comm 0.0; nvme r 1.50 GiB w 1.50 GiB, h2d 256 MiB, d2h 512 MiB". Zero parts
  // are left out.
  std::string ToString() const;
  // A JSON object with every field (the names above), for `--json`.
  std::string ToJson() const;
};

}  // namespace strata
