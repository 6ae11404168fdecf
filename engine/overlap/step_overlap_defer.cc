// StepOverlap's deferred updates (strata.deferred_updates): the sub-groups a step has left are
// updated during the next forward, each gather waiting for its own (engine/overlap/step_overlap.h).
#include <algorithm>
#include <string>

#include "engine/overlap/step_overlap.h"

namespace strata {

// Note [Deferred updates]
// Once the backward has ended, the step knows the global norm and the overflow flag, so the
// update of every sub-group is final: its grad_scale will not change. The serial step then ran
// them all before Step returned, and the next forward waited; with the optimizer state on NVMe
// that is the state's read, Adam and its write (bench/scale: 11.8 s of a 21.5 s step, alone
// after the backward, with clipping making the overlapped step's speculation fail). Instead the
// step computes the norm and hands the sub-groups it has left to the worker (Defer), in flat
// order, which is the order the next forward gathers them (stage-3 shards are laid out in
// parameter order). The forward runs at once; each gather of a parameter waits until the
// sub-groups holding its shard are updated and written into the store (ParamFence::Await, from
// the hooks' Fill), the store refuses to read a pending shard (its Prefetch skips one, its
// Acquire fails), persistent parameters are re-gathered at their first use instead of at the step
// (ZeroHooks::RegatherPersistent), and each module's hook hands finished updates to the store
// (Poll) so the worker's copy buffers come back. Everything else that touches the optimizer
// state, the host gradients or the shards waits for all of them first (the engine's
// SettleDeferred: the next Backward, Step, checkpoints, reads of the master, Synchronize, the
// destructor), and the host gradients are zeroed only then. The updates are the serial step's:
// the same kernel on the same inputs with the same grad_scale, step number and hyperparameters,
// so the result is bitwise the same; only when they run changes.
// Note [Deferred reads in order]
// The next forward gathers the deferred sub-groups in flat order, the first one (the embedding's)
// at once, so the first deferred sub-group's state is the one to read and update first. Two
// things kept it last (bench/overlap's nvme size, traced with each state read: sub-groups 2 and 1
// read during the backward, 0 only at Defer, then 1 and 2 updated before 0 while the forward
// waited for 0): the backward's read-ahead takes the sub-groups not updated yet last first (the
// order their gradients arrive), so of those left for Defer the first was read last; and the
// worker took a ready sub-group already resident before one still being read. Now the
// read-ahead puts the sub-groups the last Defer left (most steps leave the same ones) after the
// others and in flat order (WantedLocked), and while deferring the worker takes the ready ones
// in order. A sub-group whose gradients turn ready still goes first, as before.
// Note [No speculation over NVMe state with deferral]
// A speculative step (gradient_clipping, fp16, bf16's overflow check) keeps a copy of each
// sub-group it updates during the boundary backward (pageable memory, up to copy_limit_bytes,
// 1 GiB) so that a rollback can restore it. With the optimizer state on NVMe and deferral on, the
// copies bought little and were the one CPU term that depended on timing. Little: the state's
// I/O, not Adam, is such a step's time, and what the backward leaves the next forward updates
// (Defer) on the same disk; with clipping triggering (DeepSpeed's default 1.0, most steps early in
// training) every speculation was rolled back, its early I/O lost. Timing: bench/scale's 1b size
// kept one 33.5M-element sub-group (peak RSS 2.98 GB, 2.61 GB without the copies), the 71-layer
// size two (3.65 GB), so the peak RSS grew with the model (largest / smallest 1.15-1.20, target
// 1.15). So such a step is not armed (Begin returns, as in the steps after a rollback): Defer
// updates its sub-groups once the norm is known, and nothing is kept. A step that cannot change
// (no clipping, no overflow check) still updates sub-groups during the backward; so does every
// step with the state in CPU memory, or without deferral.
bool StepOverlap::CanDefer() const {
  if (o_.param_store == nullptr && o_.param_copy == nullptr) return false;
  for (size_t g = 0; g < o_.sub_groups.size(); ++g) {
    const SubGroup& sg = o_.sub_groups[g];
    if (sg.flat_end > sg.flat_begin && !eligible_[g]) return false;
  }
  return true;
}

Status StepOverlap::Defer(const OverlapStepArgs& args, const std::vector<char>& done) {
  const size_t n = o_.sub_groups.size();
  if (active_ || deferring_ || done.size() != n) {
    return InternalError("overlapped step: Defer needs a resolved step and one flag per sub-group");
  }
  if (o_.nvme_opt != nullptr) {
    STRATA_RETURN_IF_ERROR(o_.nvme_opt->PrepareSubGroupSteps().WithContext("deferred updates"));
  }
  args_ = args;
  args_.speculative = false;
  args_.deferred = true;
  final_.assign(n, 1);
  {
    std::lock_guard lock(mu_);
    if (busy_ || ring_pending_ != 0) {
      return InternalError("overlapped step: Defer while the worker still holds this step's work");
    }
    for (size_t g = 0; g < n; ++g) FreeRingLocked(g);
    done_ = done;
    for (auto& k : kept_) k.reset();
    ready_.clear();
    for (size_t g = 0; g < n; ++g) {
      if (eligible_[g] && done[g] == 0) {
        ready_.push_back(g);
        final_[g] = 0;
      }
    }
    deferred_last_.assign(n, 0);
    for (size_t g : ready_) deferred_last_[g] = 1;
    in_order_ = true;
    processed_ = 0;
    pushed_ = ready_.size();
    deferred_total_ += static_cast<int64_t>(ready_.size());
    error_ = Status::Ok();
    adam_ms_ = 0;
    read_ahead_on_ = o_.nvme_opt != nullptr;  // reads ahead in the same (flat) order
    kick_ = true;
  }
  params_written_ = final_;  // WriteBackUpdated writes the deferred ones only
  backward_ended_.store(true);
  step_started_ = true;
  active_ = true;
  deferring_ = true;
  cv_.notify_all();
  return Status::Ok();
}

bool StepOverlap::Pending(size_t param) const {
  if (!deferring_ || param >= groups_of_slice_.size()) return false;
  const auto [first, end] = groups_of_slice_[param];
  for (size_t g = first; g < end; ++g) {
    if (final_[g] == 0) return true;
  }
  return false;
}

Status StepOverlap::RefreshFinal() {
  Status write = WriteBackUpdated();  // param_store: the finished ones go into the store now
  Status worker;
  {
    std::lock_guard lock(mu_);
    for (size_t g = 0; g < final_.size(); ++g) {
      if (final_[g] != 0) continue;
      // Into the store (params_written_), or in place (param_copy is the shards) once done.
      final_[g] = o_.param_store != nullptr ? params_written_[g] : done_[g];
    }
    worker = error_;
  }
  cv_.notify_all();  // copy buffers freed
  STRATA_RETURN_IF_ERROR(write.WithContext("deferred updates"));
  return worker.WithContext("deferred updates");
}

Status StepOverlap::Poll() {
  if (!deferring_) return Status::Ok();
  return RefreshFinal();
}

Status StepOverlap::Await(size_t param) {
  if (!deferring_ || param >= groups_of_slice_.size()) return Status::Ok();
  const auto [first, end] = groups_of_slice_[param];
  for (;;) {
    STRATA_RETURN_IF_ERROR(RefreshFinal());
    if (!Pending(param)) return Status::Ok();
    std::unique_lock lock(mu_);
    // Woken by each finished update; a full ring of copy buffers needs this thread's hand-off.
    done_cv_.wait(lock, [&] {
      if (!error_.ok() || ring_pending_ > 0) return true;
      for (size_t g = first; g < end; ++g) {
        if (final_[g] == 0 && done_[g] == 0) return false;
      }
      return true;
    });
  }
}

Status StepOverlap::Settle(StepBreakdown* b) {
  if (!deferring_) return Status::Ok();
  Status first;
  {
    std::unique_lock lock(mu_);
    // The updates left still run; the read-ahead for the next phases stops (the worker does not
    // wait for its I/O while this thread waits for the worker).
    read_ahead_on_ = false;
    cv_.notify_all();
    for (;;) {
      done_cv_.wait(lock, [&] { return (processed_ == pushed_ && !busy_) || ring_pending_ > 0; });
      if (processed_ == pushed_ && !busy_ && ring_pending_ == 0) break;
      lock.unlock();
      Status s = RefreshFinal();
      if (first.ok()) first = s;
      if (!s.ok()) {  // the worker must not wait for buffers no one hands on
        std::lock_guard l(mu_);
        for (size_t g = 0; g < ring_of_.size(); ++g) FreeRingLocked(g);
      }
      lock.lock();
    }
    in_order_ = false;
    done_cv_.wait(lock, [&] { return !busy_; });
  }
  Status last = RefreshFinal();
  if (first.ok()) first = last;
  {
    std::lock_guard lock(mu_);
    b->overlapped_adam_ms += adam_ms_;
    adam_ms_ = 0;
  }
  if (o_.nvme_opt != nullptr) {  // the worker is idle: the NVMe state is the engine thread's
    const NvmeOptimizerState::AsyncStats st = o_.nvme_opt->TakeAsyncStats();
    b->nvme_read_bytes += st.bytes_read;
    b->nvme_write_bytes += st.bytes_written;
    if (GradRegion* region = o_.nvme_opt->grad_region(); region != nullptr) {
      const GradRegion::Stats rs = region->TakeStats();  // the updates' gradient reads
      b->nvme_read_bytes += rs.bytes_read;
      b->nvme_write_bytes += rs.bytes_written;
      b->grad_region_read_bytes += rs.bytes_read;
      b->grad_region_write_bytes += rs.bytes_written;
    }
  }
  if (first.ok() && std::find(final_.begin(), final_.end(), 0) != final_.end()) {
    first = InternalError("deferred updates: a sub-group was not updated");
  }
  deferring_ = false;
  active_ = false;
  step_started_ = false;
  params_written_.clear();
  return first;
}

}  // namespace strata
