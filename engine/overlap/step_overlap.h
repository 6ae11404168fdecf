// StepOverlap: the host optimizer step overlapped with the boundary micro-batch's backward
// (strata.overlap_step, stages 2-3 with offload_optimizer cpu or nvme) — issue #15 "The optimizer
// overlapped with backward, exactly".
//
// Readiness. A sub-group (engine/base/partition.h) is a run of parameter slices (whole ones; with
// NVMe swap chunks, engine/nvme/swap_chunks.h, a chunk may hold part of a slice and share it with
// its neighbours), so it is complete once every parameter it touches has been reduced into the
// device gradient partition.
// Begin (the engine, before the boundary Backward) arms a count per sub-group; the GradReducer
// reports each parameter after its += on the stream that ran it (OnReduced). At zero, the
// sub-group's gradient range goes D2H into the host gradient array on the overlap's own copy
// stream (after an event on the reduce stream: compute and communication are not held up), and a
// host function on that stream hands it to the worker thread, which runs the same update the
// serial step runs (OptimizerState::StepSubGroup, or the NVMe per-sub-group read / update / write)
// and writes the sub-group's compute-dtype copy (param_copy: the stage-3 shards themselves when
// they live in pinned CPU memory).
//
// NVMe (Note [Overlapped NVMe pipeline] in step_overlap_worker.cc): the states move through the
// optimizer's pinned swap buffers with NvmeOptimizerState's asynchronous path. The read-ahead
// starts at the boundary micro-batch's Forward (StartReadAhead), in the order backward reaches the
// sub-groups (the last first), as far as the buffers allow; each update puts the next reads in
// flight before it runs, and its state stays in its buffer, dirty, written only when the room is
// needed or on a drain (Note [Write-back] in optimizer_nvme_async.cc; a later read of that buffer
// or that sub-group waits for a write in flight; writes still in flight when the step ends
// complete during the next forward). The step stops the read-ahead (StopReadAhead) before it
// touches the state, and the serial step (a rollback, sub-groups past the kept-copy bound, a step
// not overlapped) starts with the states already read ahead.
//
// Exactness (Note [Overlapped step exactness]). The update needs grad_scale = 1 / (world *
// combined), where combined is the loss scale unless clipping triggers (it depends on the global
// norm), and an fp16 / bf16.check_grad_overflow Inf/NaN anywhere skips the step. Begin receives
// the scale assuming no clipping and no overflow (the engine's own expression, so the same
// float). Without gradient_clipping and without an overflow check that is the scale, and the
// early update is final. Otherwise it is speculative: before updating a sub-group the worker keeps
// a copy of its master, moments and param_copy range (pageable memory, at most copy_limit_bytes in
// all: sub-groups past the bound wait for the serial step). Once the step knows the norm and the
// overflow flag (computed as before from the whole host gradient array: same bits), Resolve keeps
// the early updates when the scale, step number and hyperparameters are the ones used, and
// otherwise restores the kept copies so the serial step redoes those sub-groups with the right
// scale (Rollback alone: an overflow, the step skipped). Either way the result is bitwise the
// serial step's: same kernel, same inputs, same grad_scale. A rollback costs the early work and
// the copies, so after one the next speculative steps are not overlapped (Begin leaves them to the
// serial step) until every kRetryAfter-th tries again.
//
// Stage 3: a sub-group is ready only after the last backward use of each of its parameters, and
// the copy stream runs after those uses' gathers (the reduce stream follows the compute stream),
// so rewriting their shards is safe; persistent parameters are re-gathered after the step as
// before. The write-back to device memory (stage 2's H2D + all-gather, stage 3's device shards)
// stays in the step.
//
// Thread safety: Begin, OnReduced, EndBackward, Finish, Resolve and Rollback are called by the
// engine's thread (OnReduced through the reducer); the worker thread is internal. Between Begin and
// Finish nothing else may touch the optimizer state's master, moments, host gradients (apart from
// their sub-group ranges' D2H here) or param_copy.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_adam/cpu_optimizer.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/optimizer_state.h"
#include "engine/zero/store/param_fence.h"
#include "engine/zero/store/param_store.h"
#include "offload/device/api/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"

namespace strata {

class Tracer;

struct StepOverlapOptions {
  Device* device = nullptr;
  const PartitionLayout* layout = nullptr;
  std::vector<SubGroup> sub_groups;
  // The fp32 gradient partition (device), or null when the reducer adds the reduced gradients
  // into host_grad itself (then OnReduced's stream event is all a sub-group waits for).
  const float* device_grad = nullptr;
  // Where the step reads it on the host: host_grad[f - host_begin] is flat element f, for f in
  // [host_begin, partition_numel) (host_begin > 0 with partial offload: the device sub-groups'
  // gradients stay on the device). Sub-groups below host_begin are never overlapped. Null when
  // the reducer adds into nvme_opt's gradient region (the update reads it from there).
  float* host_grad = nullptr;
  size_t host_begin = 0;
  // Exactly one: the optimizer state on the cpu tier, or on NVMe. Not owned.
  OptimizerState* cpu_opt = nullptr;
  NvmeOptimizerState* nvme_opt = nullptr;
  void* param_copy = nullptr;  // host-addressable, partition-sized, copy_dtype (may be null)
  DType copy_dtype = DType::kFloat32;
  // Stage 3 with offload_param nvme (param_copy then set): each sub-group the worker updated is
  // written from param_copy into the store (ParamStore::Write: copied into its shards' buffers,
  // NVMe writes started) by the engine's thread, at the next OnReduced or at Finish, so the step
  // writes back only the rest (params_written()). Not by the worker: the store's writes may wait
  // for the gather stream, whose all-gathers need the other ranks' engine threads to go on.
  ParamStore* param_store = nullptr;
  // param_store without param_copy (offload_param nvme, issue #36: no partition-sized staging;
  // NVMe optimizer state only): the worker writes each update's compute-dtype values into one of
  // copy_buffers buffers of the largest sub-group (plain memory charged to `budget`'s CPU tier),
  // which the engine's thread hands to param_store and frees (WriteBackUpdated); with none free
  // the worker leaves ready sub-groups queued. A speculative step then keeps master + moments
  // only: the old parameters are the kept master rounded (every write of the store is the master
  // rounded once: initialisation, loads, updates), which Rollback writes back.
  size_t copy_buffers = 2;
  TierBudget* budget = nullptr;
  // Bound on the kept copies of a speculative step (master + moments + param_copy range).
  uint64_t copy_limit_bytes = uint64_t{1} << 30;
  // Optional: a track "adam overlap" with a span per sub-group's update, and "grads ready" with a
  // span per sub-group from its last gradient's reduce to its arrival in the worker's queue.
  Tracer* tracer = nullptr;
};

// What the early update uses; Resolve compares it, field by field, with the step's own.
struct OverlapStepArgs {
  int64_t step = 0;  // the step number the update counts as (>= 1)
  Hyperparams hp;
  float grad_scale = 1.0f;
  bool speculative = true;  // clipping or an overflow check may change the scale / skip
  bool deferred = false;    // Defer's updates (the norm is known: no gradient checks)
};

class StepOverlap final : public ParamFence {
 public:
  // After a rollback, speculative steps run serially; every kRetryAfter-th one tries again.
  static constexpr int kRetryAfter = 8;
  // How often the worker, waiting for I/O with nothing ready, looks at the ready queue again.
  static constexpr std::chrono::microseconds kIoPoll{1000};

  // Creates the copy stream, its event and the worker thread. InvalidArgument when the options
  // are incomplete.
  static Result<std::unique_ptr<StepOverlap>> Create(StepOverlapOptions options);
  // Waits for the copy stream and joins the worker (pending work is dropped; writes in flight
  // stay with the NVMe state, which drains them).
  ~StepOverlap();
  StepOverlap(const StepOverlap&) = delete;
  StepOverlap& operator=(const StepOverlap&) = delete;

  // NVMe: the boundary micro-batch's Forward starts the worker reading ahead (no-op on the cpu
  // tier, or while a step is armed).
  Status StartReadAhead();
  // Stops the read-ahead and waits for the worker to be idle (the step then owns the NVMe state);
  // adds the NVMe bytes moved since the step began to `b`. Unless a step is armed (Finish reports
  // those), the first error of the read-ahead: a failed deferred write names its file and offset.
  Status StopReadAhead(StepBreakdown* b);

  // Arms the counts for the boundary micro-batch's backward. An earlier step still armed (Step
  // was not called) is first rolled back.
  Status Begin(const OverlapStepArgs& args);
  // The reducer's ReducedFn: parameter `param`'s range is reduced as of `stream`'s work so far.
  Status OnReduced(const Stream& stream, size_t param);
  // The reducer's flush hint: `param`'s gradient is complete (queued for reduction); true when
  // it is the last of an eligible sub-group's this backward, so the bucket is reduced now.
  bool CompletesSubGroup(size_t param);
  // The engine finished enqueuing the boundary backward (sub-groups done before count as early).
  void EndBackward() { backward_ended_.store(true); }
  bool active() const { return active_; }

  // Waits for every overlapped update, then copies the gradient ranges of the sub-groups not
  // overlapped D2H on `stream` (synchronized) and adds the D2H bytes, the overlapped Adam time
  // and NVMe bytes to `b`. The first error of the copies or the worker.
  Status Finish(const Stream& stream, StepBreakdown* b);
  // After Finish: if `args` equals what the early updates used, they stand and *done marks the
  // sub-groups they updated (the serial step skips those, and with param_store their parameters
  // were written back too); else Rollback and *done is all zero (a rolled-back early write is
  // overwritten by the step's own write-back of every sub-group). Ends the step.
  Status Resolve(const OverlapStepArgs& args, std::vector<char>* done);
  // After Finish: restores every kept copy (the state before the early updates) and ends the
  // step. Internal if an early update had no kept copy (a non-speculative step cannot roll back).
  Status Rollback();

  // Deferred updates (strata.deferred_updates, Note [Deferred updates] in step_overlap_defer.cc).
  // Whether Defer can take every sub-group the step has left: stage 3 with the shards where the
  // worker's updates reach them without the step (param_copy is the pinned CPU shards, or
  // param_store is set), and no sub-group on the device side of a partial offload.
  bool CanDefer() const;
  // After Resolve (or Rollback), with the step's final `args` (the norm known, no overflow): the
  // sub-groups not in `done` are updated by the worker from now on, in flat order (the order the
  // next forward gathers them), and Step returns. Their parameters are pending (ParamFence) until
  // their updates reach the shards; the host gradients they read must stay until Settle.
  Status Defer(const OverlapStepArgs& args, const std::vector<char>& done);
  // Waits for every deferred update and its write-back; adds their Adam time and NVMe bytes to
  // `b`. The first error of those updates (naming the sub-group). A no-op unless deferring.
  Status Settle(StepBreakdown* b);
  bool deferring() const { return deferring_; }
  // With deferral: Finish leaves the sub-groups still queued when the backward has ended to the
  // step's Defer instead of waiting for their updates; with the state on NVMe, a speculative
  // step is not armed at all (Note [No speculation over NVMe state with deferral]).
  void set_defer_leftovers(bool on) { defer_leftovers_ = on; }
  // Sub-groups handed to Defer (cumulative).
  int64_t deferred_sub_groups() const { return deferred_total_; }
  // ParamFence (engine thread).
  bool Pending(size_t param) const override;
  Status Await(size_t param) override;
  Status Poll() override;

  // After Resolve: the sub-groups whose parameters this step wrote back into param_store (empty
  // or all zero without one, after a rollback, or when the step was not overlapped); it is
  // forgotten here, so a later step never skips a write on its account.
  std::vector<char> TakeParamsWritten() { return std::exchange(params_written_, {}); }

  // Sub-groups updated early (cumulative), and of those the ones done before EndBackward.
  int64_t overlapped_sub_groups() const { return overlapped_.load(); }
  int64_t early_sub_groups() const { return early_.load(); }
  // Sub-groups whose parameters WriteBackUpdated wrote into param_store (cumulative).
  int64_t early_param_write_backs() const { return param_write_backs_; }
  // Bytes of the copy buffers (StepOverlapOptions::copy_buffers; 0 with param_copy).
  uint64_t copy_buffer_bytes() const {
    return ring_pool_ != nullptr ? uint64_t{ring_pool_->buffer_bytes()} * ring_.size() : 0;
  }

 private:
  struct Kept {                 // a speculative sub-group's state before its early update
    std::vector<float> state;   // master | exp_avg | exp_avg_sq
    std::vector<uint8_t> copy;  // param_copy range
  };
  explicit StepOverlap(StepOverlapOptions o) : o_(std::move(o)) {}
  size_t Numel(size_t g) const { return o_.sub_groups[g].numel(); }
  uint64_t KeptBytes(size_t g) const;
  void WorkerLoop();
  void Push(size_t g);  // the copy stream's host function: g's gradients are on the host
  Status UpdateOne(size_t g, const std::vector<int>& wanted);
  // The sub-groups the NVMe read-ahead wants, soonest first (mu_ held): `first` (if >= 0), the
  // ready ones, then the rest not updated yet, last first, but those the last step deferred in
  // flat order at the end (Note [Deferred reads in order] in step_overlap_defer.cc).
  std::vector<int> WantedLocked(int first) const;
  void ResetStepLocked();
  // Engine thread: writes the parameters of the sub-groups updated since the last call into
  // param_store (no-op without one).
  Status WriteBackUpdated();
  // Stops the read-ahead and waits until the worker is idle (the NVMe state's drain hook).
  void PauseWorker();
  // Copy buffers (StepOverlapOptions::copy_buffers): in use, and whether one is free (mu_).
  bool ring() const { return !ring_.empty(); }
  bool CanUpdateLocked() const { return ring_.empty() || !ring_free_.empty(); }
  // Finish's wait for the copy stream, handing finished copy buffers on meanwhile (Note [Copy
  // buffers back while the last gradients land]).
  Status AwaitCopies();
  void HandOnCopyBuffers();
  void FreeRingLocked(size_t g);

  StepOverlapOptions o_;
  // Slice s touches sub-groups [groups_of_slice_[s].first, .second) (one unless chunks cut it).
  std::vector<std::pair<size_t, size_t>> groups_of_slice_;
  // OnReduced for one sub-group g that `param` touches.
  Status OnReducedGroup(const Stream& stream, size_t g);
  std::vector<char> eligible_;  // on the host side of the split, and not empty
  Stream copy_stream_;
  Event reduced_;
  Event copies_done_;  // AwaitCopies
  std::thread worker_;

  // Engine thread only.
  bool active_ = false;
  bool deferring_ = false;  // Defer ran; Settle not yet
  int64_t deferred_total_ = 0;
  bool defer_leftovers_ = false;
  std::vector<char> final_;  // deferring: the sub-group's shards hold its update
  // Deferring: marks final_ the sub-groups whose updates reached the shards; the worker's error.
  Status RefreshFinal();
  bool step_started_ = false;  // StartReadAhead or Begin reset the step's state
  OverlapStepArgs args_;
  std::vector<size_t> remaining_;     // unreduced slices per sub-group
  std::vector<size_t> unqueued_;      // slices per sub-group not yet queued for reduction
  std::vector<char> copied_;          // D2H enqueued here
  std::vector<char> params_written_;  // WriteBackUpdated wrote the sub-group's parameters
  int64_t param_write_backs_ = 0;
  Status write_back_error_;  // the first failed WriteBackUpdated of OnReduced (Finish reports it)
  uint64_t kept_bytes_ = 0;
  uint64_t pushed_expected_ = 0;
  bool rolled_back_ = false;  // the last speculative step was undone
  int serial_since_rollback_ = 0;

  // Shared with the worker (mu_).
  std::mutex mu_;
  std::condition_variable cv_;       // the worker waits for work
  std::condition_variable done_cv_;  // Finish waits for the worker
  std::deque<size_t> ready_;
  std::vector<char> done_;                   // updated early this step
  std::vector<std::unique_ptr<Kept>> kept_;  // speculative copies
  uint64_t processed_ = 0, pushed_ = 0;
  bool stop_ = false, busy_ = false;
  bool read_ahead_on_ = false;  // NVMe: the worker reads ahead while it has nothing ready
  // Deferring: the worker takes the ready sub-groups in order, not resident first; which
  // sub-groups the last Defer left (Note [Deferred reads in order]).
  bool in_order_ = false;
  std::vector<char> deferred_last_;
  bool kick_ = false;  // something changed: the read-ahead looks again
  Status error_;
  double adam_ms_ = 0;

  // The copy buffers (ring mode): free ones, and the one holding sub-group g's update, or -1
  // (mu_); ring_pending_ counts those not yet handed to param_store.
  std::unique_ptr<PinnedPool> ring_pool_;
  std::vector<PinnedBuffer> ring_;
  std::vector<int> ring_free_;
  std::vector<int> ring_of_;
  size_t ring_pending_ = 0;
  bool copies_landed_ = false;  // AwaitCopies: the copy stream reached its host function (mu_)

  std::atomic<bool> backward_ended_{false};
  std::atomic<int64_t> overlapped_{0}, early_{0};
};

}  // namespace strata
