// ZeroHooks: the module hooks of ZeRO stages 2 and 3 — what happens to a module's parameters
// around its forward and backward.
//
// Stage 3 (partition_params): between uses only this rank's compute-dtype shard of a parameter
// lives (in `shards`: device memory, or pinned CPU memory with offload_param.device = cpu). At
// PreForward/PreBackward the module's parameters — its own and the external ones it declares
// (a tied LM head's weight) — are gathered: [H2D of the shard] -> all-gather into a device
// buffer -> Parameter::set_data; at PostForward/PostBackward they are released (set_data(nullptr),
// the buffer freed in stream order). Gathers nest (a count per parameter), so a parameter two
// live modules use is gathered once. Persistent parameters (numel <= the persistence threshold)
// are gathered by RegatherPersistent (the engine calls it once the shards hold values, and after
// every step) and never released. Activation checkpointing
// re-runs forward hooks inside backward: they gather and release as in forward.
// With offload_param cpu the shard is copied H2D straight into its place in the gathered buffer
// and all-gathered in place (no staging buffer; at world 1 no device copy at all). Stage 3's
// ParamCoordinator (engine/zero/hooks/param_coordinator.h) records the hook order of the first pass
// and then gathers ahead and keeps parameters reused soon, through the same nested gather/release.
//
// Gradients (stages 2 and 3): a parameter's gradient is complete when the last module that uses
// it has finished its backward (PostBackward seen as many times as modules use it: twice for a
// tied embedding). Then the slot goes to the GradReducer (reduce-scatter += into the fp32
// partition). At stage 3 the fp32 slot exists only from the first PreBackward of a module using
// the parameter to that reduce (allocated, zero-filled; freed after the reduce); at stage 2 the
// slots are the engine's permanent ones and are zeroed after the reduce. Keeping a tied
// parameter's slot until its last user (instead of reducing once per user) sums its gradient in
// the order stage 0 does, so world-1 runs stay bitwise equal to stage 0.
//
// Streams (Note [Gather stream]): stage 3's gathers — the shard's H2D copy into its slot and the
// all-gather — run on the hooks' own gather stream, so gathers taken ahead overlap the model's
// kernels; each records a per-parameter event there, and the compute stream waits for it only
// at the pre hook of a module that uses the parameter. A released buffer goes back to a pool
// (engine/zero/hooks/gather_pool.h) with an event of its last use on the compute stream, and the
// next gather that takes it waits for that event on the gather stream. Persistent parameters are
// gathered on the compute stream (at the step, where nothing is ahead to overlap).
//
// Touched rows (Note [Touched rows] in nn/tensor/parameter.h; Note [Rows only] in zero3_hooks.cc):
// at one rank, a parameter one module uses and whose forward lists the rows it touches (the
// embedding) is gathered for that module's own forward with only those rows copied, not
// gathered at all for a backward that does not read it (Module::BackwardReadsParameters), and
// its gradient leaves the device as those rows only when the reducer can take them.
//
// Thread safety: hooks run on the thread that drives the model (the engine's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/comm/communicator.h"
#include "engine/zero/grad/grad_reducer.h"
#include "engine/zero/hooks/gather_pool.h"
#include "engine/zero/hooks/param_coordinator.h"
#include "engine/zero/hooks/pending_frees.h"
#include "engine/zero/store/param_store.h"
#include "nn/modules/layers/module.h"
#include "offload/device/api/device.h"

namespace strata {

struct ZeroHooksOptions {
  Communicator* comm = nullptr;
  Device* device = nullptr;
  Stream compute;  // the model's stream: releases, slot fills, persistent gathers
  std::vector<nn::Parameter*> params;  // the root's NamedParameters()
  const PartitionLayout* layout = nullptr;
  DType dtype = DType::kFloat32;  // compute dtype of parameters and shards
  // Stage 3: parameters partitioned; `store` holds this rank's compute-dtype shards (device,
  // pinned CPU or NVMe: engine/zero/store/param_store.h). Not owned.
  bool partition_params = false;
  ParamStore* store = nullptr;
  int64_t persistence_threshold = 0;  // stage3_param_persistence_threshold (elements)
  GradReducer* reducer = nullptr;     // not owned
  // Inference (ZeRO-Inference, engine/zero_inference.h): no reducer, no backward; a pass ends at
  // FinishForward.
  bool forward_only = false;
  // The host enqueues ahead of the device, and a released buffer returns to the device only
  // when its stream reaches the free: without a bound every module's gathered parameters and
  // gradient slots could be outstanding at once. When the bytes held plus those freed but not
  // yet returned would pass these limits, the hooks wait for those frees first (0: no limit;
  // engine/zero/hooks/pending_frees.h).
  // The engine sets them to what its memory plan counts (engine/plan/memory_plan.h).
  // gathered parameters (stage3_max_live_parameters): also the bound of the pool of gathered
  // buffers, free ones included (0: no pool, a buffer allocated and freed per gather)
  uint64_t param_limit_bytes = 0;
  uint64_t slot_limit_bytes = 0;  // fp32 gradient slots (reduce buckets + one parameter)
  Stream comm_stream;             // where the reducer frees slots with overlap_comm (or invalid)
  // Stage 3 prefetching (engine/zero/hooks/param_coordinator.h), in elements:
  // stage3_prefetch_bucket_size (0: no prefetch), stage3_max_live_parameters,
  // stage3_max_reuse_distance.
  int64_t prefetch_bucket_numel = 0;
  int64_t max_live_numel = 0;
  int64_t max_reuse_distance_numel = 0;
};

class ZeroHooks final : public nn::ModuleHooks, private Gatherer {
 public:
  // Counts each parameter's users in `root`'s tree; at stage 3 marks every parameter released.
  static Result<std::unique_ptr<ZeroHooks>> Create(nn::Module& root, const ZeroHooksOptions& o);
  // Waits for the streams and frees every gathered buffer and slot.
  ~ZeroHooks() override;

  Status OnHook(nn::HookPoint point, nn::Module& module, const nn::RunContext& ctx) override;

  // End of a backward pass: hands slots whose users did not all run backward to the reducer,
  // and flushes it. Afterwards compute-stream work sees the reduced partition.
  Status FinishBackward();
  // forward_only: the end of a forward pass (the coordinator's EndPass: holds released, the
  // recorded trace checked and replayed from the next pass on).
  Status FinishForward();
  // Stage 3: re-gathers the persistent parameters from the (updated) shards, now; or, after a
  // step whose updates were deferred (`at_next_use`), each at its next gather, which waits for
  // its update (Note [Deferred updates] in engine/overlap/step_overlap_defer.cc); until then it
  // keeps its old values. Note [Persistent re-gathers in the same order on every rank].
  Status RegatherPersistent(bool at_next_use = false);

  // The reducer's SlotDoneFn: stage 3 frees the slot (in `stream` order), stage 2 zeroes it.
  Status SlotDone(const Stream& stream, size_t param, float* slot);

  // Adds the parameter traffic since the last call to `b`: the store's (NVMe bytes, read wait;
  // ParamStore::AddTo) and the gathers' host-to-device shard copies (h2d_bytes, and h2d_ms: the
  // copies' own time on the gather stream, hidden behind compute or not). Call it after the
  // compute stream has been synchronised (copies still running are counted next time).
  void AddTo(StepBreakdown* b);
  // The gathers' host-to-device bytes enqueued since the last AddTo (the engine takes the
  // forwards' share: StepBreakdown::forward_h2d_bytes).
  uint64_t h2d_bytes_pending() const { return h2d_bytes_; }

  bool persistent(size_t param) const { return state_[param].persistent; }
  // Device bytes held now by gathered parameters (the pool's free buffers included) and stage-3
  // gradient slots, and the peak.
  uint64_t live_bytes() const { return live_bytes_ + (pool_ ? pool_->free_bytes() : 0); }
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }
  // Stage 3: non-persistent parameter elements gathered now and at most (since creation).
  uint64_t live_numel() const override { return gathered_numel_; }
  uint64_t peak_live_numel() const { return peak_gathered_numel_; }
  // Stage 3's coordinator (null below stage 3).
  const ParamCoordinator* coordinator() const { return coord_.get(); }
  // Stage 3: the stream gathers run on (invalid below stage 3), and the buffer pool's counts.
  const Stream& gather_stream() const { return gather_; }
  GatherPoolStats pool_stats() const { return pool_ ? pool_->stats() : GatherPoolStats{}; }

 private:
  struct ParamState {
    int users = 0;     // modules that use it (own + external)
    int gathered = 0;  // nested gathers in flight
    int backward_seen = 0;
    bool persistent = false;
    void* full = nullptr;       // gathered buffer (from pool_)
    size_t full_bytes = 0;      // its size
    float* slot = nullptr;      // stage 3 gradient slot
    Event ready;                // recorded on the gather stream after the all-gather
    bool wait_pending = false;  // the compute stream has not waited for `ready` yet
    bool rows_only = false;     // gathered as its touched rows (Note [Rows only])
    bool stale = false;         // persistent, re-gathered at its next use (RegatherPersistent)
  };
  explicit ZeroHooks(const ZeroHooksOptions& o) : o_(o), pending_frees_(o.device) {}
  Status Gather(size_t i);
  // Takes a buffer and enqueues the shard copy + all-gather of parameter i on `stream`.
  Status Fill(size_t i, const Stream& stream);
  // Persistent parameter i's gather from its (updated) shard, on the compute stream.
  Status RefillPersistent(size_t i);
  Status Release(size_t i);
  // Whether this gather of parameter i copies only its touched rows (Note [Rows only]).
  bool RowsOnly(size_t i) const;
  // Makes the compute stream wait for parameter i's gather (once per gather).
  Status WaitReady(size_t i);
  // A new pass starts: the gather stream is ordered after the compute stream's work so far
  // (shards the step wrote on it).
  Status BeginPass();
  Result<Event> TimingEvent();
  // Gatherer (the coordinator's holds are nested gathers).
  Status GatherParam(size_t i) override { return Gather(i); }
  Status ReleaseParam(size_t i) override { return Release(i); }
  bool IsLive(size_t i) const override { return state_[i].persistent || state_[i].full != nullptr; }
  bool IsPersistent(size_t i) const override { return state_[i].persistent; }
  Status AcquireSlot(size_t i);
  // The pass is over for parameter i: its slot (zeroed if no module wrote it) goes to the reducer.
  Status SlotReady(size_t i);
  void AddLive(uint64_t bytes);
  // Device allocation for a gradient slot; on OutOfMemory the pool's free buffers go first, then
  // the frees in flight on the compute and comm streams are waited for (AllocateAfterFrees).
  Result<void*> AllocateSlot(size_t bytes);
  const std::vector<size_t>& ParamsOf(const nn::Module& m) const;
  // Note [Module spans on the compute stream]: a module's span begins (begin) or ends (its
  // `phase`, "forward" or "backward") on the compute stream, with a trace only.
  Status TraceCompute(const nn::Module& module, bool begin, const char* phase = "");

  ZeroHooksOptions o_;
  std::vector<ParamState> state_;
  std::unordered_map<const nn::Module*, std::vector<size_t>> uses_;
  // Note [Module spans on the compute stream]: the begin time of each module's open span.
  std::unordered_map<const nn::Module*, std::shared_ptr<double>> compute_begin_;
  uint64_t live_bytes_ = 0, peak_live_bytes_ = 0;
  uint64_t param_bytes_ = 0, slot_bytes_ = 0;  // held now, by kind
  PendingFrees pending_frees_;                 // freed in stream order, maybe not back yet
  uint64_t gathered_numel_ = 0, peak_gathered_numel_ = 0;
  std::unique_ptr<ParamCoordinator> coord_;
  // Stage 3 (Note [Gather stream]).
  Stream gather_;
  std::unique_ptr<GatherPool> pool_;
  bool in_pass_ = false;
  bool own_gather_ = false;  // Gather is called from the module's own pre-forward hook
  Event pass_event_;
  // The gathers' H2D shard copies since the last AddTo: bytes, and timing events around each.
  uint64_t h2d_bytes_ = 0;
  std::vector<std::pair<Event, Event>> h2d_events_;
  std::vector<Event> spare_timing_;
  // strata.trace_path: spans of the gather stream on its own track (begin times per parameter,
  // written and read by host tasks on the gather stream, in its order).
  std::vector<double> trace_begin_us_;
};

}  // namespace strata
