#include "engine/plan/pageable_plan.h"

#include <algorithm>
#include <string>

namespace strata {

// Note [Pageable terms]
// Measured with scripts/run.sh's job (configs/llama_nvme.json, the `small` preset: stage 3,
// params and optimizer on NVMe, bf16, gradient_clipping 1.0) by sampling /proc/PID/smaps and
// VmHWM, and with heaptrack: of the 297 MiB of pageable peak (RSS growth less the device and
// pinned peaks) during training, 259 MiB went away with strata.overlap_step false or
// gradient_clipping 0 — the speculative overlapped step's kept copies (engine/optim/
// step_overlap.h: before a sub-group is updated during the boundary backward, its master, moments
// and compute-dtype copy are kept in case clipping or an overflow changes the step; at most
// StepOverlapOptions::copy_limit_bytes, 1 GiB). The rest (~38 MiB there, 18 MiB with the `tiny`
// preset) is the items memory_plan.cc lists (aio bounce buffers, the initial values' largest
// parameter, batch staging) and what glibc keeps of the buffers Initialize freed; with
// MALLOC_MMAP_THRESHOLD_=131072 it measures 0, so it is not a term of its own. Exporting from a
// checkpoint maps and verifies the checkpoint's shard (tools/strata/train/cmd_train_memory.cc
// plans that term).

namespace {

constexpr uint64_t kKeptCopyLimit = uint64_t{1} << 30;  // StepOverlapOptions::copy_limit_bytes

void Add(MemoryPlan* plan, std::string what, uint64_t bytes) {
  if (bytes == 0) return;
  plan->items.push_back({std::move(what), PlanTier::kPageableCpu, bytes});
  plan->tier_bytes[static_cast<size_t>(PlanTier::kPageableCpu)] += bytes;
}

}  // namespace

void AddPageableItems(const ModelShape& /*model*/, const Config& config, const PageableInputs& in,
                      MemoryPlan* plan) {
  const ZeroConfig& z = config.zero;
  // engine_overlap.cc: the overlapped step runs at stages 2-3 with the optimizer on the host; it
  // is speculative under clipping, fp16 or bf16's overflow check.
  const bool overlap = config.strata.overlap_step && z.stage >= 2 &&
                       z.offload_optimizer.device != OffloadDevice::kNone;
  const bool speculative = config.training.gradient_clipping > 0 || config.fp16.enabled ||
                           config.bf16.check_grad_overflow;
  // offload_param nvme with the NVMe optimizer state: the old parameters are the kept master
  // rounded (engine/optim/step_overlap.h), so no compute copy is kept.
  const bool no_copy = z.stage == 3 && z.offload_param.device == OffloadDevice::kNvme &&
                       z.offload_optimizer.device == OffloadDevice::kNvme;
  const uint64_t kept_copy_bytes = no_copy ? 0 : in.compute_bytes;
  if (overlap && speculative) {
    Add(plan,
        "speculative overlapped step: kept master + moments + compute copy of the sub-groups "
        "updated during backward (strata.overlap_step under clipping / fp16; at most 1 GiB)",
        std::min(kKeptCopyLimit, in.offloaded_numel * (12 + kept_copy_bytes)));
  }
}

}  // namespace strata
