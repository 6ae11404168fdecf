// Engine's private state: streams and the buffers it places (engine.cc, engine_step.cc).
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "engine/base/step_breakdown.h"
#include "engine/base/trace.h"
#include "engine/engine.h"
#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/param_copy_target.h"
#include "engine/overlap/step_overlap.h"
#include "engine/zero/grad/grad_reducer.h"
#include "engine/zero/hooks/zero3_hooks.h"
#include "engine/zero/store/param_store.h"
#include "offload/pinned_pool.h"

namespace strata {

struct Engine::Impl {
  // First, so it outlives every pool charged to it (members are destroyed in reverse order).
  TierBudget own_budget;
  // strata.trace_path ("" = disabled); before nvme_opt, which records into it.
  std::unique_ptr<Tracer> tracer;
  int compute_track = 0;  // the tracer's "stream compute" track
  // offload_optimizer.device = nvme: the optimizer state (the engine's opt_ is then null).
  std::unique_ptr<NvmeOptimizerState> nvme_opt;
  // strata.overlap_step (engine/overlap/step_overlap.h; engine_overlap.cc): null when off. Uses the
  // optimizer state, so it goes first (Release).
  std::unique_ptr<StepOverlap> overlap;
  // strata.deferred_updates in effect (engine_overlap.cc): the store's fence is `overlap`.
  bool defer_updates = false;
  // The optimizer steps on the host (cpu tier or nvme): gradients go D2H, params H2D.
  bool host_opt = false;
  // The step being measured, and the last one finished (Engine::last_breakdown).
  StepBreakdown breakdown;
  StepBreakdown last_breakdown;
  double step_begin_ms = -1;  // steady-clock milliseconds of the step's first Forward
  // Timing events around each forward and backward on the compute stream, read at the step
  // (after its synchronisation), so the breakdown times the device's work without the host
  // waiting for it at every micro-step.
  std::vector<std::pair<Event, Event>> forward_events, backward_events;
  Stream compute;  // the model's forward/backward and the engine's copies
  Stream comm;     // collectives (ordered after compute with events)
  int part_world = 1;

  // Device buffers (owned; freed by Release).
  void* params_flat = nullptr;         // full compute params, full_offset[i] elements apart
  void* grads_flat = nullptr;          // fp32 gradient slots, same offsets
  void* shard_flat = nullptr;          // this rank's compute-dtype partition (device)
  void* grad_partition_dev = nullptr;  // fp32 partition of gradients (cpu tier only)
  void* scalar = nullptr;              // one float for the overflow flag and the norm
  std::vector<size_t> full_offset;
  size_t full_numel = 0;
  uint64_t device_bytes = 0;

  // Where the reduced gradient partition is accumulated (device memory: the optimizer's own
  // array on the device tier, grad_partition_dev on the cpu tier).
  void* grad_partition = nullptr;
  // Stages 2-3 with offload_optimizer cpu/nvme: the reducer adds the reduced gradients of flat
  // elements [host_grad_begin, n) straight into host_grad (the optimizer's pinned array) and the
  // device gradient partition holds only [0, host_grad_begin) (partial offload; none otherwise).
  bool grads_to_host = false;
  float* host_grad = nullptr;
  size_t host_grad_begin = 0;
  // Or, offload_optimizer nvme with strata.nvme_grad_chunk: the NVMe gradient region (the
  // optimizer's; engine/nvme/grad_region.h) behind the reducer's target, host_grad null.
  GradTarget* grad_target = nullptr;
  // grads_to_host and an optimizer whose result does not depend on a zero gradient's sign (not
  // Adagrad): the step marks host_grad stale instead of zeroing it (Note [Copy first]).
  bool host_grad_copy_first = false;
  // Elements of grad_partition (device): the partition's `n`, or [0, host_grad_begin).
  size_t DeviceGradNumel(size_t n) const { return grads_to_host ? host_grad_begin : n; }
  // Where the optimizer writes the updated compute-dtype partition (host-addressable).
  // Null with offload_param nvme and the NVMe optimizer state: param_target then takes the
  // updates a sub-group at a time (engine/optim/param_copy_target.h; issue #36).
  void* param_copy = nullptr;
  std::unique_ptr<PinnedPool> staging_pool;
  PinnedBuffer staging;
  std::unique_ptr<StoreParamCopy> param_target;

  // Stage 3: where this rank's compute-dtype shards live between uses (device memory, pinned CPU
  // memory with offload_param.device = cpu, NVMe with nvme); null below stage 3. `shards` is its
  // flat array when it has one (the in-memory tiers: the optimizer writes it in place), else null.
  std::unique_ptr<ParamStore> store;
  void* shards = nullptr;
  bool shards_on_host = false;
  // Stages 2-3: gradient reduction and the module hooks (stage 3: gather/release).
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<ZeroHooks> hooks;
  uint64_t cpu_bytes = 0;

  Hyperparams hyperparams;
  std::vector<SubGroup> sub_groups;
  TierBudget* budget = nullptr;
  std::vector<std::pair<void*, size_t>> owned;

  // Stages 2-3 (zero3_engine.cc): the GradReducer and the ZeroHooks, added to `model`'s tree.
  Status PlaceHooks(nn::Module& model, const ZeroConfig& z, Communicator& comm, Device& device,
                    const std::vector<nn::Parameter*>& params, const PartitionLayout& layout,
                    DType dtype);
  // EngineStats' per-tier bytes: what the engine holds now, and the device peak.
  void FillMemoryStats(const OptimizerState* opt, EngineStats* stats) const;

  Status AllocDevice(Device& device, size_t bytes, const char* what, void** out) {
    Result<void*> r = device.Allocate(std::max<size_t>(bytes, 256));
    if (!r.ok()) {
      return r.status().WithContext(std::string("engine: ") + what + " (" + FormatBytes(bytes) +
                                    ")");
    }
    *out = *r;
    owned.emplace_back(*r, bytes);
    device_bytes += bytes;
    return Status::Ok();
  }

  void FreeDevice(Device& device, void* p) {
    for (size_t i = 0; i < owned.size(); ++i) {
      if (owned[i].first != p) continue;
      device_bytes -= owned[i].second;
      owned.erase(owned.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    device.Free(p).IgnoreError();
  }

  void Release(Device& device) {
    overlap.reset();  // its worker and copy stream use the optimizer state and the gradients
    if (compute.valid()) compute.Synchronize().IgnoreError();
    if (comm.valid()) comm.Synchronize().IgnoreError();
    hooks.reset();  // frees gathered parameters and slots (the model's hooks are removed)
    reducer.reset();
    staging.Release();
    param_target.reset();
    store.reset();
    for (auto& [p, bytes] : owned) device.Free(p).IgnoreError();
    owned.clear();
    if (compute.valid()) device.DestroyStream(compute).IgnoreError();
    if (comm.valid()) device.DestroyStream(comm).IgnoreError();
  }
};

}  // namespace strata
