#include "engine/plan/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/units.h"
#include "engine/base/partition.h"
#include "engine/nvme/grad_region.h"
#include "engine/nvme/swap_chunks.h"
#include "engine/optim/partial_offload.h"
#include "engine/plan/pageable_plan.h"
#include "engine/zero/grad/grad_reducer.h"

namespace strata {

// Note [Stage 3 and NVMe plans]
// Stages 0-3 with offload none/cpu follow the engine allocation by allocation (engine.cc Place,
// zero3_hooks.cc, grad_reducer.cc). At stage 3 the host enqueues ahead of the device and a
// gathered parameter (a host shard is copied straight into it and all-gathered in place) is
// freed only when the stream reaches its release, so up to stage3_max_live_parameters elements
// can be gathered at once; every parameter's fp32 gradient slot lives until its
// reduce_bucket_size bucket is reduce-scattered (twice a bucket with overlap_comm). NVMe
// placement is planned from the design until the engine builds it: master + exp_avg +
// exp_avg_sq of each sub-group as one swap extent (each part 4 KiB aligned), buffer_count pinned
// buffers of the largest sub-group, the fp32 gradient partition in pinned CPU memory;
// offload_param nvme: buffer_count x buffer_size
// elements of pinned buffers, the shards within max_in_cpu kept in CPU memory, the rest on NVMe;
// the updated parameters go back to the store a swap chunk at a time (no partition-sized staging
// with the NVMe optimizer state: engine/optim/param_copy_target.h), and the CPU-kept shards have
// the store's own storage (with offload_optimizer cpu they live in the staging instead).
// The swappers' aio bounce buffers are not planned: every request is aligned (Note [Pageable
// terms] in pageable_plan.cc).

namespace {

// With offload_param nvme (offload_optimizer cpu) the staging also holds the shards kept in CPU
// (max_in_cpu).
std::string StagingLabel(OffloadDevice param_device) {
  return param_device == OffloadDevice::kNvme
             ? "updated parameter staging (+ the max_in_cpu parameter shards)"
             : "updated parameter staging";
}

constexpr uint64_t kPlanAlignNumel = 64;  // engine.cc's partition alignment
constexpr uint64_t kDeviceGranule = 256;  // DeviceArena::kAlignment (cudaMalloc: 256/512)
constexpr uint64_t kPinnedSmall = 4096;   // PinnedPool: O_DIRECT alignment
constexpr uint64_t kPinnedHuge = uint64_t{2} << 20;  // PinnedPool: huge pages past 2 MiB
constexpr uint64_t kPlanSwapAlign = 4096;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t AlignNumel(uint64_t n) { return RoundUp(n, kPlanAlignNumel); }
uint64_t DeviceAlloc(uint64_t bytes) {
  return RoundUp(std::max(bytes, kDeviceGranule), kDeviceGranule);
}
uint64_t PinnedAlloc(uint64_t bytes) {
  bytes = std::max<uint64_t>(bytes, 64);
  return RoundUp(bytes, bytes >= kPinnedHuge ? kPinnedHuge : kPinnedSmall);
}

class Planner {
 public:
  explicit Planner(MemoryPlan* plan) : plan_(plan) {}
  void Add(PlanTier tier, std::string what, uint64_t bytes) {
    AddPlanItem(plan_, {std::move(what), tier, bytes});
  }
  void Device(std::string what, uint64_t bytes) {
    if (bytes > 0) Add(PlanTier::kDevice, std::move(what), DeviceAlloc(bytes));
  }
  void Pinned(std::string what, uint64_t bytes, bool pin) {
    Add(pin ? PlanTier::kPinnedCpu : PlanTier::kPageableCpu, std::move(what), PinnedAlloc(bytes));
  }
  // A PinnedPool of `count` buffers of `each` bytes: rounded per buffer, as the pool rounds each
  // (offload/pinned_pool.cc), not the sum.
  void PinnedBuffers(std::string what, uint64_t count, uint64_t each, bool pin) {
    Add(pin ? PlanTier::kPinnedCpu : PlanTier::kPageableCpu, std::move(what),
        count * PinnedAlloc(each));
  }

 private:
  MemoryPlan* plan_;
};

std::string Placement(const Config& c, DType dtype) {
  const ZeroConfig& z = c.zero;
  std::string s = "ZeRO-" + std::to_string(z.stage) + ", offload_optimizer " +
                  std::string(OffloadDeviceName(z.offload_optimizer.device));
  if (z.stage == 3)
    s += ", offload_param " + std::string(OffloadDeviceName(z.offload_param.device));
  return s + ", " + std::string(DTypeName(dtype));
}

// Bytes of one sub-group's swap extent: [params | exp_avg | exp_avg_sq], each 4 KiB aligned.
uint64_t SwapExtentBytes(uint64_t numel) { return 3 * RoundUp(numel * 4, kPlanSwapAlign); }

}  // namespace

std::string_view PlanTierName(PlanTier tier) {
  switch (tier) {
    case PlanTier::kDevice:
      return "device";
    case PlanTier::kPinnedCpu:
      return "pinned cpu";
    case PlanTier::kPageableCpu:
      return "pageable cpu";
    case PlanTier::kNvme:
      return "nvme";
  }
  return "?";
}

std::string_view PlanPhaseName(PlanPhase phase) {
  switch (phase) {
    case PlanPhase::kRun:
      return "run";
    case PlanPhase::kInitialize:
      return "initialize";
    case PlanPhase::kSteps:
      return "steps";
    case PlanPhase::kSave:
      return "save";
    case PlanPhase::kExport:
      return "export";
  }
  return "?";
}

void AddPlanItem(MemoryPlan* plan, PlanItem item) {
  if (item.bytes == 0) return;
  const size_t t = static_cast<size_t>(item.tier);
  plan->items.push_back(std::move(item));
  // The tier's whole-run items plus its largest phase.
  std::array<uint64_t, kNumPlanPhases> by_phase{};
  for (const PlanItem& i : plan->items) {
    if (static_cast<size_t>(i.tier) == t) by_phase[static_cast<size_t>(i.phase)] += i.bytes;
  }
  plan->tier_bytes[t] = by_phase[0] + *std::max_element(by_phase.begin() + 1, by_phase.end());
}

std::string_view PlanTierKey(PlanTier tier) {
  switch (tier) {
    case PlanTier::kDevice:
      return "device";
    case PlanTier::kPinnedCpu:
      return "pinned_cpu";
    case PlanTier::kPageableCpu:
      return "pageable_cpu";
    case PlanTier::kNvme:
      return "nvme";
  }
  return "?";
}

ModelShape ShapeFromNumels(std::vector<uint64_t> numels, std::string name) {
  ModelShape s;
  s.name = std::move(name);
  s.param_numels = std::move(numels);
  return s;
}

double StepTraffic::NominalSeconds(int nodes) const {
  const double gb = 1e9;
  const double net = nodes > 1 ? 12.5 * gb : 100 * gb;
  return static_cast<double>(host_to_device_bytes + device_to_host_bytes) / (25 * gb) +
         static_cast<double>(nvme_read_bytes) / (3 * gb) +
         static_cast<double>(nvme_write_bytes) / (2.5 * gb) +
         static_cast<double>(collective_bytes) / net;
}

Result<MemoryPlan> PlanEngineMemory(const ModelShape& model, const Config& config,
                                    const PlanOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return InvalidArgumentError("memory plan: rank " + std::to_string(options.rank) + " of world " +
                                std::to_string(options.world) + " (world >= 1, 0 <= rank < world)");
  }
  if (model.param_numels.empty()) {
    return InvalidArgumentError("memory plan: model '" + model.name + "' has no parameters");
  }
  const ZeroConfig& z = config.zero;
  if (z.stage < 0 || z.stage > 3) {
    return InvalidArgumentError("memory plan: zero_optimization.stage " + std::to_string(z.stage) +
                                " (allowed: 0-3)");
  }
  const DType dtype = config.bf16.enabled   ? DType::kBFloat16
                      : config.fp16.enabled ? DType::kFloat16
                                            : DType::kFloat32;
  const uint64_t cb = DTypeBytes(dtype);
  const int part_world = z.stage >= 1 ? options.world : 1;
  std::vector<size_t> numels(model.param_numels.begin(), model.param_numels.end());
  STRATA_ASSIGN_OR_RETURN(
      PartitionLayout layout,
      PartitionLayout::Create(numels, part_world, z.stage >= 1 ? options.rank : 0,
                              kPlanAlignNumel));
  uint64_t full = 0, max_shard = 0;
  for (uint64_t n : model.param_numels) full += AlignNumel(n);
  for (const ShardSlice& s : layout.slices())
    max_shard = std::max<uint64_t>(max_shard, s.shard_numel);
  const uint64_t part = layout.partition_numel();
  // offload_optimizer nvme: the swap chunks (strata.swap_chunk_bytes), as the engine steps them.
  const OptimizerSwapPlan swap_plan = PlanOptimizerSwap(layout, config);
  const std::vector<SubGroup>& groups = swap_plan.groups;

  MemoryPlan plan;
  plan.placement = Placement(config, dtype);
  plan.world = options.world;
  Planner p(&plan);
  const OffloadDevice od = z.offload_optimizer.device;
  const OffloadDevice pd = z.stage == 3 ? z.offload_param.device : OffloadDevice::kNone;
  const bool opt_pin = z.offload_optimizer.pin_memory;
  // Partial offload (offload_optimizer.ratio < 1): the first sub-groups, [0, split), keep
  // master + moments in device memory and step there (engine/optim/partial_offload.h).
  const uint64_t split = PartialOffloadSplit(z, groups);

  // Compute-dtype parameters and the fp32 gradient slots.
  if (z.stage <= 2) {
    p.Device("compute parameters (full, " + std::string(DTypeName(dtype)) + ")", full * cb);
    p.Device("fp32 gradient slots (full)", full * 4);
    p.Device("updated parameter partition", part * cb);
  } else {
    // zero3_hooks.cc: persistent parameters gathered for good, one allocation each; the
    // others gathered around their module's use; a gradient slot per parameter from its backward
    // until its bucket is reduce-scattered (all of them when reduce_bucket_size >= the model).
    uint64_t persistent = 0, largest = 0, largest_any = 0, slots = 0, gathered = 0;
    for (uint64_t n : model.param_numels) {
      if (static_cast<int64_t>(n) <= z.param_persistence_threshold) {
        persistent += DeviceAlloc(n * cb);
      } else {
        largest = std::max(largest, n);
        // A host shard is gathered in place: room for every rank's slot, padding included.
        gathered += DeviceAlloc(pd == OffloadDevice::kNone
                                    ? n * cb
                                    : PartitionLayout::ShardNumel(n, part_world) * part_world * cb);
      }
      largest_any = std::max(largest_any, n);
      slots += DeviceAlloc(n * 4);
    }
    // The host enqueues ahead of the device and a gathered parameter is freed when the stream
    // reaches its release: up to stage3_max_live_parameters elements can be live at once.
    const uint64_t max_live = std::max<uint64_t>(
        largest, static_cast<uint64_t>(std::max<int64_t>(z.max_live_parameters, 0)));
    gathered = std::min(gathered, max_live * cb);
    const uint64_t bucket = static_cast<uint64_t>(std::max<int64_t>(z.reduce_bucket_size, 1));
    const uint64_t live_slots =
        std::min(slots, ((z.overlap_comm ? 2 : 1) * bucket + largest_any) * 4);
    const std::string dn(DTypeName(dtype));
    switch (pd) {
      case OffloadDevice::kNone:
        p.Device("parameter shard (" + dn + ")", part * cb);
        break;
      case OffloadDevice::kCpu:
        p.Pinned("parameter shard (" + dn + ", offload_param cpu)", part * cb,
                 z.offload_param.pin_memory);
        break;
      case OffloadDevice::kNvme: {
        // engine/zero/store/param_store_nvme.cc: ParamSwapper keeps shards in CPU memory while
        // their running total stays within max_in_cpu; the others get one 4 KiB-aligned swap extent
        // each.
        const uint64_t max_in_cpu =
            static_cast<uint64_t>(std::max<int64_t>(z.offload_param.max_in_cpu, 0));
        uint64_t in_cpu = 0, swap = 0, largest_swapped = 0;
        for (const ShardSlice& s : layout.slices()) {
          if (s.shard_numel == 0) continue;
          if (in_cpu + s.shard_numel <= max_in_cpu) {
            in_cpu += s.shard_numel;
          } else {
            largest_swapped = std::max<uint64_t>(largest_swapped, s.shard_numel);
            swap += RoundUp(s.shard_numel * cb, kPlanSwapAlign);
          }
        }
        // swap/param_swapper.cc refuses a shard its buffers cannot hold together.
        const uint64_t count =
            static_cast<uint64_t>(std::max<int64_t>(z.offload_param.buffer_count, 1));
        const uint64_t hold =
            count * static_cast<uint64_t>(std::max<int64_t>(z.offload_param.buffer_size, 0));
        if (largest_swapped > hold) {
          return InvalidArgumentError(
              "zero_optimization.offload_param: a parameter shard of " +
              std::to_string(largest_swapped) +
              " elements is more than all swap buffers hold (buffer_count x buffer_size = " +
              std::to_string(hold) + "); set offload_param.buffer_size to at least " +
              std::to_string((largest_swapped + count - 1) / count) +
              ", or to \"auto\" (the planner chooses)");
        }
        // With offload_optimizer cpu the ones kept in CPU live in the updated parameter staging
        // (Note [Shared CPU shards] in param_store_nvme.cc): no bytes of their own. With nvme
        // the store keeps them in one buffer of their own (at most max_in_cpu elements).
        if (od == OffloadDevice::kNvme) {
          p.Pinned("parameter shards kept in CPU (offload_param.max_in_cpu)", in_cpu * cb,
                   z.offload_param.pin_memory);
        }
        p.PinnedBuffers("parameter swap buffers (buffer_count x buffer_size)",
                        static_cast<uint64_t>(z.offload_param.buffer_count),
                        static_cast<uint64_t>(z.offload_param.buffer_size) * cb,
                        z.offload_param.pin_memory);
        p.Add(PlanTier::kNvme, "parameter shard swap file", swap);
        break;
      }
    }
    p.Add(PlanTier::kDevice, "persistent parameters (gathered for good)", persistent);
    p.Add(PlanTier::kDevice, "gathered parameters (up to stage3_max_live_parameters)", gathered);
    p.Add(PlanTier::kDevice, "fp32 gradient slots (until their bucket is reduced)", live_slots);
  }

  // fp32 master + moments + gradient partition, and where updated parameters are staged.
  const uint64_t cpu_part = part - split;
  // Stages 2-3 with the optimizer offloaded reduce the CPU part's gradients straight into the
  // pinned host array through staging buffers (engine/zero/grad/grad_reducer.h): the device
  // gradient partition keeps only the device sub-groups' [0, split).
  const bool grads_to_host = z.stage >= 2 && od != OffloadDevice::kNone;
  if (grads_to_host) {
    const uint64_t staging = GradStagingNumel(
        max_shard, static_cast<size_t>(std::max<int64_t>(z.reduce_bucket_size, 0)), part_world);
    p.Add(opt_pin ? PlanTier::kPinnedCpu : PlanTier::kPageableCpu,
          "gradient staging (reduce -> host, " + std::to_string(kGradStagingBuffers) + " buffers)",
          kGradStagingBuffers * PinnedAlloc(staging * 4));
  }
  const uint64_t device_grad = grads_to_host ? split : part;
  switch (od) {
    case OffloadDevice::kNone:
      p.Device("fp32 master + moments + gradient partition", 16 * part);
      break;
    case OffloadDevice::kCpu:
      p.Device(split > 0 && grads_to_host ? "fp32 gradient partition (device sub-groups)"
                                          : "fp32 gradient partition",
               device_grad * 4);
      p.Pinned("fp32 master + moments + gradients (offload_optimizer cpu)", 16 * cpu_part, opt_pin);
      if (split > 0) {
        p.Device("fp32 master + moments of the device sub-groups (ratio)", 12 * split);
      }
      if (pd != OffloadDevice::kCpu) p.Pinned(StagingLabel(pd), part * cb, opt_pin);
      break;
    case OffloadDevice::kNvme: {
      uint64_t largest_group = 0, swap = 0;
      for (const SubGroup& g : groups) {
        largest_group = std::max<uint64_t>(largest_group, g.flat_end - g.flat_begin);
        swap += SwapExtentBytes(g.flat_end - g.flat_begin);
      }
      p.Device("fp32 gradient partition", device_grad * 4);
      // Stages 2-3 with strata.nvme_grad_chunk: the gradients on NVMe (engine/nvme/
      // grad_region.h) — its chunk buffers, one sub-group's gradients read for its update.
      const size_t grad_chunk =
          z.stage >= 2 ? static_cast<size_t>(config.strata.nvme_grad_chunk_bytes / 4) : 0;
      if (grad_chunk > 0) {
        GradRegionOptions ro;
        ro.chunk_numel = grad_chunk;
        p.Add(opt_pin ? PlanTier::kPinnedCpu : PlanTier::kPageableCpu,
              "gradient region buffers (" + std::to_string(GradRegionBufferCount(ro, part)) +
                  " x strata.nvme_grad_chunk)",
              GradRegionCpuBytes(ro, part));  // rounded per buffer as the pool does
        // Charged to the engine's CPU tier (its budget), not page-locked: planned in that tier.
        p.Add(PlanTier::kPinnedCpu,
              "swap chunk gradients read from the region (largest, not locked)",
              PinnedAlloc(4 * std::max<uint64_t>(largest_group, 1)));
        p.Add(PlanTier::kNvme, "fp32 gradient region", GradRegionNvmeBytes(grad_chunk, part));
      } else {
        p.Pinned("fp32 gradient partition (CPU)", part * 4, opt_pin);
      }
      // buffer_count of them, or under strata.swap_chunk_bytes "auto" the same bytes in finer
      // chunks (Note [Auto swap chunks]).
      const uint64_t swap_buffers =
          static_cast<uint64_t>(std::max<int64_t>(swap_plan.buffer_count, 1));
      p.PinnedBuffers(
          "optimizer swap buffers (" + std::to_string(swap_buffers) + " x largest swap chunk)",
          swap_buffers, SwapExtentBytes(largest_group), opt_pin);
      // NvmeOptimizerState stages one sub-group's master + moments for initialisation,
      // gathers and checkpoints; charged to the CPU budget with the pinned buffers.
      p.Pinned("optimizer state staging (one swap chunk)", 12 * largest_group, opt_pin);
      if (pd == OffloadDevice::kNvme) {
        // No partition-sized staging: each chunk's update goes to the parameter store from one
        // chunk-sized buffer (engine/optim/param_copy_target.h), and the overlapped step's
        // worker from its own copy buffers (charged to the CPU tier, not locked).
        p.Pinned("updated parameter write-back buffer (largest swap chunk)", largest_group * cb,
                 opt_pin);
        if (config.strata.overlap_step && z.stage >= 2) {
          p.Add(PlanTier::kPinnedCpu,
                "overlapped step: updated parameter buffers (2 x largest swap chunk, not locked)",
                2 * PinnedAlloc(largest_group * cb));
        }
      } else if (pd != OffloadDevice::kCpu) {
        p.Pinned(StagingLabel(pd), part * cb, opt_pin);
      }
      p.Add(PlanTier::kNvme, "fp32 master + moments swap file", swap);
      plan.notes.push_back("offload nvme: planned from the design (Note [Stage 3 and NVMe plans])");
      break;
    }
  }
  if (z.stage >= 2) p.Device("reduce-scatter buffer (largest shard, fp32)", max_shard * 4);
  p.Device("step scalars", 4);
  // The process, the host GEMM's scratch, what the step keeps on the side, each in its phase
  // (engine/plan/pageable_plan.h).
  AddPageableItems(
      model, config,
      {.offloaded_numel = part - split, .compute_bytes = cb, .largest_shard = max_shard}, &plan);

  // The model's own buffers.
  p.Device("model buffers (batch-independent)", model.fixed_device_bytes);
  if (options.include_activations) {
    const ActivationBytes& a =
        options.activation_checkpointing ? model.activations_checkpointed : model.activations;
    const std::string how = options.activation_checkpointing ? ", checkpointed" : "";
    const std::string note =
        model.activation_note.empty() ? "" : " (" + model.activation_note + how + ")";
    p.Add(PlanTier::kDevice, "activations + activation gradients" + note, a.device_bytes);
    p.Add(PlanTier::kPinnedCpu, "activation checkpoints in CPU memory" + note, a.pinned_bytes);
    p.Add(PlanTier::kPageableCpu, "batch staging" + note, a.host_bytes);
  }

  // Step traffic, per rank.
  StepTraffic& t = plan.traffic;
  const uint64_t gas =
      static_cast<uint64_t>(std::max<int64_t>(config.batch.gradient_accumulation_steps, 1));
  const uint64_t w = static_cast<uint64_t>(options.world);
  if (w > 1) {
    const uint64_t grads = full * 4;
    if (z.stage <= 1) t.collective_bytes += 2 * grads * (w - 1) / w;              // ring all-reduce
    if (z.stage >= 2) t.collective_bytes += gas * grads * (w - 1) / w;            // reduce-scatter
    if (z.stage == 1 || z.stage == 2) t.collective_bytes += part * cb * (w - 1);  // all-gather
    if (z.stage == 3) t.collective_bytes += gas * 2 * part * cb * (w - 1);  // fwd + bwd gathers
  }
  if (od != OffloadDevice::kNone) {
    if (grads_to_host) {  // each micro-batch's reduced shards of the CPU part
      uint64_t host_shards = 0;
      for (const ShardSlice& s : layout.slices()) {
        const uint64_t end = s.flat_offset + s.shard_numel;
        if (end > split) host_shards += end - std::max<uint64_t>(s.flat_offset, split);
      }
      t.device_to_host_bytes += gas * host_shards * 4;
    } else {
      t.device_to_host_bytes += (part - split) * 4;
    }
    t.host_to_device_bytes += (part - split) * cb;
  }
  if (od == OffloadDevice::kNvme) {
    uint64_t swap = 0;
    for (const SubGroup& g : groups) swap += SwapExtentBytes(g.flat_end - g.flat_begin);
    t.nvme_read_bytes += swap;
    t.nvme_write_bytes += swap;
    if (z.stage >= 2 && config.strata.nvme_grad_chunk_bytes > 0) {
      // The gradient region, at most: each micro-batch writes the partition; each later one and
      // the step read it back (chunks still in the buffers cost nothing).
      t.nvme_write_bytes += gas * part * 4;
      t.nvme_read_bytes += gas * part * 4;
    }
  }
  if (pd != OffloadDevice::kNone) {
    t.host_to_device_bytes += gas * 2 * part * cb;  // the shard goes up for forward and backward
    if (pd == OffloadDevice::kNvme) {
      const uint64_t in_cpu = std::min<uint64_t>(
          part, static_cast<uint64_t>(std::max<int64_t>(z.offload_param.max_in_cpu, 0)));
      t.nvme_read_bytes += gas * 2 * (part - in_cpu) * cb;
      t.nvme_write_bytes += (part - in_cpu) * cb;
    }
  }
  return plan;
}

}  // namespace strata
