// The engine's stage 2-3 glue: the gradient reducer and module hooks it installs, and its
// per-tier memory figures.
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_impl.h"

namespace strata {

Status Engine::Impl::PlaceHooks(nn::Module& model, const ZeroConfig& z, Communicator& comm,
                                Device& device, const std::vector<nn::Parameter*>& params,
                                const PartitionLayout& layout, DType dtype) {
  GradReducerOptions ro;
  ro.comm = &comm;
  ro.device = &device;
  ro.compute = compute;
  ro.comm_stream = this->comm;
  ro.overlap = z.overlap_comm;
  ro.bucket_numel = static_cast<size_t>(std::max<int64_t>(z.reduce_bucket_size, 0));
  ro.layout = &layout;
  ro.partition = static_cast<float*>(grad_partition);
  if (grads_to_host) {  // offload_optimizer cpu/nvme: straight into the pinned host gradients
    ro.host_partition = host_grad;
    ro.host_begin = host_grad_begin;
    ro.host_target = grad_target;  // then host_grad is null
    ro.pin_memory = z.offload_optimizer.pin_memory;
    ro.budget = budget;
  }
  ro.slot_done = [this](const Stream& s, size_t param, float* slot) {
    return hooks->SlotDone(s, param, slot);
  };
  STRATA_ASSIGN_OR_RETURN(reducer, GradReducer::Create(ro));
  cpu_bytes += reducer->cpu_bytes();  // its pinned staging buffers
  ZeroHooksOptions ho;
  ho.comm = &comm;
  ho.device = &device;
  ho.compute = compute;
  ho.params = params;
  ho.layout = &layout;
  ho.dtype = dtype;
  ho.partition_params = z.stage == 3;
  ho.store = store.get();
  ho.persistence_threshold = z.param_persistence_threshold;
  ho.reducer = reducer.get();
  if (z.stage == 3) {  // the bounds engine/plan/memory_plan.cc counts for stage 3
    const uint64_t cb = DTypeBytes(dtype);
    uint64_t persistent = 0, largest = 0;
    for (const nn::Parameter* p : params) {
      const uint64_t n = static_cast<uint64_t>(p->numel());
      largest = std::max(largest, n);
      if (static_cast<int64_t>(n) <= z.param_persistence_threshold) persistent += n * cb;
    }
    const uint64_t max_live = std::max<uint64_t>(
        largest, static_cast<uint64_t>(std::max<int64_t>(z.max_live_parameters, 0)));
    const uint64_t bucket = static_cast<uint64_t>(std::max<int64_t>(z.reduce_bucket_size, 1));
    ho.param_limit_bytes = persistent + max_live * cb;
    ho.slot_limit_bytes = ((z.overlap_comm ? 2 : 1) * bucket + largest) * sizeof(float);
    if (z.overlap_comm) ho.comm_stream = this->comm;
    ho.prefetch_bucket_numel = std::max<int64_t>(z.prefetch_bucket_size, 0);
    ho.max_live_numel = static_cast<int64_t>(max_live);
    ho.max_reuse_distance_numel = std::max<int64_t>(z.max_reuse_distance, 0);
  }
  STRATA_ASSIGN_OR_RETURN(hooks, ZeroHooks::Create(model, ho));
  model.AddHooksRecursive(hooks.get());
  return Status::Ok();
}

void Engine::Impl::FillMemoryStats(const OptimizerState* opt, EngineStats* stats) const {
  const uint64_t fixed = device_bytes + (store != nullptr ? store->device_bytes() : 0) +
                         (opt != nullptr && opt->tier() == Tier::kDevice ? opt->size_bytes() : 0);
  const uint64_t live = hooks != nullptr ? hooks->live_bytes() : 0;
  const uint64_t peak = hooks != nullptr ? hooks->peak_live_bytes() : 0;
  stats->device_bytes = fixed + live;
  stats->device_peak_bytes = std::max(stats->device_peak_bytes, fixed + peak);
  stats->cpu_bytes = cpu_bytes;
  if (hooks != nullptr && hooks->coordinator() != nullptr) {
    const CoordinatorStats& c = hooks->coordinator()->stats();
    stats->prefetch_hits = c.hits;
    stats->prefetch_misses = c.misses;
    stats->prefetch_bytes = c.prefetched_bytes;
    stats->trace_invalidations = c.invalidations;
    stats->prefetch_read_bytes = c.read_ahead_bytes;
    stats->peak_live_param_numel = hooks->peak_live_numel();
  }
}

}  // namespace strata
