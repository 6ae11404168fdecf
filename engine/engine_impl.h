// Engine's private state: streams and the buffers it places (engine.cc, engine_step.cc).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "core/units.h"
#include "engine/engine.h"
#include "offload/pinned_pool.h"

namespace strata {

struct Engine::Impl {
  // First, so it outlives every pool charged to it (members are destroyed in reverse order).
  TierBudget own_budget;
  Stream compute;  // the model's forward/backward and the engine's copies
  Stream comm;     // collectives (ordered after compute with events)
  int part_world = 1;

  // Device buffers (owned; freed by Release).
  void* params_flat = nullptr;         // full compute params, full_offset[i] elements apart
  void* grads_flat = nullptr;          // fp32 gradient slots, same offsets
  void* shard_flat = nullptr;          // this rank's updated compute-dtype partition
  void* grad_partition_dev = nullptr;  // fp32 partition of gradients (cpu tier only)
  void* reduce_tmp = nullptr;          // stage 2: one parameter's reduce-scattered shard
  void* scalar = nullptr;              // one float for the overflow flag and the norm
  std::vector<size_t> full_offset;
  size_t full_numel = 0;
  uint64_t device_bytes = 0;

  // Where the reduced gradient partition is accumulated (device memory: the optimizer's own
  // array on the device tier, grad_partition_dev on the cpu tier).
  void* grad_partition = nullptr;
  // Where the optimizer writes the updated compute-dtype partition (host-addressable).
  void* param_copy = nullptr;
  std::unique_ptr<PinnedPool> staging_pool;
  PinnedBuffer staging;

  Hyperparams hyperparams;
  std::vector<SubGroup> sub_groups;
  TierBudget* budget = nullptr;
  std::vector<void*> owned;

  Status AllocDevice(Device& device, size_t bytes, const char* what, void** out) {
    Result<void*> r = device.Allocate(std::max<size_t>(bytes, 256));
    if (!r.ok()) {
      return r.status().WithContext(std::string("engine: ") + what + " (" + FormatBytes(bytes) +
                                    ")");
    }
    *out = *r;
    owned.push_back(*r);
    device_bytes += bytes;
    return Status::Ok();
  }

  void FreeDevice(Device& device, void* p) {
    std::erase(owned, p);
    device.Free(p).IgnoreError();
  }

  void Release(Device& device) {
    if (compute.valid()) compute.Synchronize().IgnoreError();
    if (comm.valid()) comm.Synchronize().IgnoreError();
    staging.Release();
    for (void* p : owned) device.Free(p).IgnoreError();
    owned.clear();
    if (compute.valid()) device.DestroyStream(compute).IgnoreError();
    if (comm.valid()) device.DestroyStream(comm).IgnoreError();
  }
};

}  // namespace strata
