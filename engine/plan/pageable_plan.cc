#include "engine/plan/pageable_plan.h"

#include <algorithm>
#include <string>

namespace strata {

// Note [Pageable terms]
// Measured on scripts/run.sh's job (configs/llama_nvme.json, the `small` preset, 19.1M
// parameters: stage 3, params and optimizer on NVMe, bf16, gradient_clipping 1.0, --save and
// --export) by sampling /proc/PID/smaps every 20 ms (the mappings: the emulated device's arena,
// the PinnedPools, the checkpoint's file, malloc's arenas and mmaps), with heaptrack for the
// allocation sites, and again on the `tiny` preset and on configs/llama_offload_cpu.json. The
// pageable tier's peak is not the sum of its terms: they come in phases (PlanPhase), and what a
// phase allocates is freed before the next begins, so the tier is the whole-run terms plus the
// largest phase:
//   run        the process once the engine runs, beyond the RSS at `strata train`'s start: code
//              and library pages touched later, ~20 thread stacks (~0.1 MiB touched each),
//              OpenBLAS's GEMM buffer (1.5 MiB touched of its mapping), oneTBB's and malloc's
//              small objects: 13-14 MiB on tiny and small alike (kProcessPageableBytes). And with
//              a 16-bit compute dtype on the host-emulated device, the fp32 copy a GEMM makes of
//              its 16-bit weight operand (nn/host/host_gemm.cc, a per-thread scratch that grows to
//              the largest weight and stays: 3 MiB on small, heaptrack). Initialize runs no GEMM,
//              so that copy is an item of the steps, save and export phases: on the 1b preset
//              (configs/llama_nvme.json, 250 MiB) planned as a whole-run item beside
//              initialisation's 250 MiB it made the plan 514 MiB for a peak of 280 MiB.
//   initialize the initial values of one parameter at a time (fp32, the largest).
//   steps      the speculative overlapped step's kept copies (engine/overlap/step_overlap.h: before
//              a sub-group is updated during the boundary backward its master and moments, and
//              its compute-dtype copy unless the parameters are on NVMe, are kept in case
//              clipping or an overflow changes the step; at most copy_limit_bytes, 1 GiB). Planned
//              for every offloaded element: how many sub-groups are updated before backward ends
//              depends on the machine (2 of the 4 swap chunks here, 91 MiB of the planned 219),
//              and when clipping triggers only every StepOverlap::kRetryAfter-th step tries.
//              None with the state on NVMe and the updates deferred (Note [No speculation over
//              NVMe state with deferral] in engine/overlap/step_overlap_defer.cc).
//   save       with the optimizer state not host-addressable (NVMe), Engine::SaveCheckpoint's
//              streaming buffer of one swap chunk's master + moments (12 B an element; the
//              state's own staging of that chunk is charged to the pinned tier).
//   export     from a saved checkpoint: the rank's shard mapped and verified (master + moments,
//              12 B per partition element, file pages), one safetensors shard's bytes in memory
//              (the whole model at the exported dtype up to 5 GB: WriteSafetensorsCheckpoint) and
//              one parameter's fp32 values; from the engine, the shard's bytes and the values.
// glibc raises its mmap threshold to the largest block freed (up to 32 MiB) and then keeps such
// blocks in its arenas (27-54 MiB here, the kept copies' last chunk), so the phases overlapped;
// `strata train` fixes the threshold (KeepLargeBlocksMapped in engine/plan/run_memory.h) so
// large blocks are returned when freed. The aio bounce buffers (queue_depth x block_size per
// thread) are mapped only for a request that is not O_DIRECT-aligned, which the engine never
// issues (its buffers come from PinnedPools, its extents are 4 KiB aligned): none was touched,
// so they are not a term.
// Figures (peak / planned, MiB; the peak as engine/plan/run_memory.h measures it): the main job
// 273 / 276; `tiny` on the same config 25 / 26; configs/llama_offload_cpu.json on `small` 273 /
// 276, and 269 / 273 without --save / --export; but the main config without them 117 / 236, the
// kept copies' bound not reached (docs/infinity.md, "The pageable tier is planned").

namespace {

constexpr uint64_t kKeptCopyLimit = uint64_t{1} << 30;  // StepOverlapOptions::copy_limit_bytes
constexpr uint64_t kExportShardLimit = 5'000'000'000;   // the safetensors shard size exported

void Add(MemoryPlan* plan, PlanPhase phase, std::string what, uint64_t bytes) {
  AddPlanItem(plan, {std::move(what), PlanTier::kPageableCpu, bytes, phase});
}

}  // namespace

void AddPageableItems(const ModelShape& model, const Config& config, const PageableInputs& in,
                      MemoryPlan* plan) {
  const ZeroConfig& z = config.zero;
  Add(plan, PlanPhase::kRun,
      "the process: code pages, thread stacks, OpenBLAS's buffer, small objects (measured)",
      kProcessPageableBytes);
  if (config.strata.device != DeviceChoice::kCuda && in.compute_bytes == 2) {
    // From the first forward on (Initialize runs no GEMM): in the steps and whatever follows them.
    for (const PlanPhase phase : {PlanPhase::kSteps, PlanPhase::kSave, PlanPhase::kExport}) {
      Add(plan, phase,
          "host GEMM: fp32 copy of a 16-bit weight operand (the largest parameter; from the first "
          "forward on)",
          model.LargestParameter() * 4);
    }
  }
  Add(plan, PlanPhase::kInitialize, "parameter initialisation (largest parameter, fp32)",
      model.LargestParameter() * 4);
  // engine_overlap.cc: the overlapped step runs at stages 2-3 with the optimizer on the host; it
  // is speculative under clipping, fp16 or bf16's overflow check.
  const bool overlap = config.strata.overlap_step && z.stage >= 2 &&
                       z.offload_optimizer.device != OffloadDevice::kNone;
  const bool speculative = config.training.gradient_clipping > 0 || config.fp16.enabled ||
                           config.bf16.check_grad_overflow;
  // offload_param nvme with the NVMe optimizer state: the old parameters are the kept master
  // rounded (engine/overlap/step_overlap.h), so no compute copy is kept.
  const bool no_copy = z.stage == 3 && z.offload_param.device == OffloadDevice::kNvme &&
                       z.offload_optimizer.device == OffloadDevice::kNvme;
  const uint64_t kept_copy_bytes = no_copy ? 0 : in.compute_bytes;
  // Note [No speculation over NVMe state with deferral] (engine/overlap/step_overlap_defer.cc):
  // with the state on NVMe and the updates deferred (stage 3, parameters offloaded), nothing is
  // kept.
  const bool deferred_nvme = config.strata.deferred_updates && z.stage == 3 &&
                             z.offload_param.device != OffloadDevice::kNone &&
                             z.offload_optimizer.device == OffloadDevice::kNvme;
  if (overlap && speculative && !deferred_nvme) {
    Add(plan, PlanPhase::kSteps,
        "speculative overlapped step: kept master + moments" +
            std::string(no_copy ? "" : " + compute copy") +
            " of the sub-groups updated during backward (strata.overlap_step under clipping / "
            "fp16; at most 1 GiB)",
        std::min(kKeptCopyLimit, in.offloaded_numel * (12 + kept_copy_bytes)));
  }
}

void AddSaveExportItems(const Config& config, const SaveExportInputs& in, MemoryPlan* plan) {
  if (in.save && config.zero.offload_optimizer.device == OffloadDevice::kNvme) {
    Add(plan, PlanPhase::kSave,
        "checkpoint save: one swap chunk's master + moments streamed to the shard file",
        12 * in.largest_chunk);
  }
  if (!in.export_from_checkpoint && !in.export_from_engine) return;
  if (in.export_from_checkpoint) {
    Add(plan, PlanPhase::kExport,
        "export from the checkpoint: its master + moments shard mapped and verified (file pages)",
        12 * in.partition_numel);
  }
  Add(plan, PlanPhase::kExport,
      "export: one safetensors shard's bytes (the model at the exported dtype, up to 5 GB)",
      std::min(kExportShardLimit, in.num_params * in.export_bytes));
  Add(plan, PlanPhase::kExport, "export: one parameter's fp32 values (the largest)",
      in.largest_param * 4);
}

}  // namespace strata
