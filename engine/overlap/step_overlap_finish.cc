// StepOverlap's end of a step (engine/overlap/step_overlap.h): the copy buffers handed on to the
// parameter store, the wait for the last updates (Finish), and what follows once the step's
// norm and overflow are known (Resolve, Rollback). The worker is in step_overlap_worker.cc, the
// deferred updates in step_overlap_defer.cc.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "engine/base/trace.h"
#include "engine/overlap/step_overlap.h"
#include "engine/zero/store/zero3_shards.h"

namespace strata {
namespace {

bool SameHyperparams(const Hyperparams& a, const Hyperparams& b) {
  return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.adam_w_mode == b.adam_w_mode &&
         a.bias_correction == b.bias_correction;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

// Ring mode, engine thread, mu_ not held: the finished updates' copy buffers go to the parameter
// store (after a failed write-back they are only freed: the step fails), and the worker waiting
// for one is woken.
void StepOverlap::HandOnCopyBuffers() {
  if (write_back_error_.ok()) {
    write_back_error_ = WriteBackUpdated();
  } else {
    std::lock_guard l(mu_);
    for (size_t g = 0; g < ring_of_.size(); ++g) FreeRingLocked(g);
  }
  cv_.notify_all();
}

// Note [Copy buffers back while the last gradients land]
// With the updated parameters going to the parameter store through copy buffers (ring mode), the
// worker takes a ready sub-group only when a buffer is free, and the engine's thread hands the
// finished ones on: at each OnReduced during the backward, then in Finish. Finish used to wait
// for the copy stream first (every gradient on the host), so past the backward's last reduce the
// buffers stayed full until the last gradient had landed: in bench/overlap's io size with every
// state resident the worker sat 7 ms with sub-group 1 ready, and sub-groups 1 and 0 were left to
// the next forward, whose first gathers waited for their updates (gaps of 4 and 6 ms). Now the
// engine's thread hands each finished buffer on as the worker fills it until the copy stream is
// done (a host function at its end wakes it; the event's Query, polled, also ends the wait on a
// stream that failed before reaching it).
Status StepOverlap::AwaitCopies() {
  if (!ring()) return copy_stream_.Synchronize();
  {
    std::lock_guard lock(mu_);
    copies_landed_ = false;
  }
  STRATA_RETURN_IF_ERROR(copy_stream_.LaunchHostFunc([this] {
    {
      std::lock_guard lock(mu_);
      copies_landed_ = true;
    }
    done_cv_.notify_all();
  }));
  STRATA_RETURN_IF_ERROR(copies_done_.Record(copy_stream_));
  std::unique_lock lock(mu_);
  while (!copies_landed_) {
    if (ring_pending_ > 0) {
      lock.unlock();
      HandOnCopyBuffers();
      lock.lock();
      continue;
    }
    done_cv_.wait_for(lock, kIoPoll, [&] { return copies_landed_ || ring_pending_ > 0; });
    if (copies_landed_ || ring_pending_ > 0) continue;
    lock.unlock();
    Result<bool> done = copies_done_.Query();
    lock.lock();
    if (!done.ok() || *done) break;
  }
  lock.unlock();
  return copy_stream_.Synchronize();
}

Status StepOverlap::Finish(const Stream& stream, StepBreakdown* b) {
  if (!active_) return Status::Ok();
  Status s = AwaitCopies();  // every copy done, every host function run
  Status worker;
  {
    std::unique_lock lock(mu_);
    read_ahead_on_ = false;  // the ready ones still read what they need
    cv_.notify_all();        // a worker waiting for read-ahead I/O stops waiting
    if (defer_leftovers_ && s.ok()) {
      // Note [Deferred updates] (step_overlap_defer.cc): the sub-groups still queued (the copy
      // stream is done: nothing more is pushed) are left to Defer, after the norm.
      processed_ += ready_.size();
      ready_.clear();
    }
    for (;;) {
      done_cv_.wait(
          lock, [&] { return (processed_ == pushed_ && !busy_) || !s.ok() || ring_pending_ > 0; });
      if ((processed_ == pushed_ && !busy_) || !s.ok()) break;
      // Ring mode: the worker may wait for a copy buffer; hand the finished updates on.
      lock.unlock();
      HandOnCopyBuffers();
      lock.lock();
    }
    if (!s.ok()) done_cv_.wait(lock, [&] { return !busy_; });
    worker = error_;
    b->overlapped_adam_ms += adam_ms_;
  }
  if (o_.nvme_opt != nullptr) {  // the worker is idle: the NVMe state is the engine thread's
    const NvmeOptimizerState::AsyncStats st = o_.nvme_opt->TakeAsyncStats();
    b->nvme_read_bytes += st.bytes_read;
    b->nvme_write_bytes += st.bytes_written;
  }
  step_started_ = false;
  if (!s.ok() || !worker.ok()) {  // the step fails; undo what can be undone
    Rollback().IgnoreError();
    return !s.ok() ? s.WithContext("overlapped step: gradient copies") : worker;
  }
  if (pushed_ != pushed_expected_) {
    return InternalError("overlapped step: " + std::to_string(pushed_) + " of " +
                         std::to_string(pushed_expected_) + " sub-groups reached the worker");
  }
  if (write_back_error_.ok()) write_back_error_ = WriteBackUpdated();
  if (!write_back_error_.ok()) {  // the store may hold early parameters: roll back, then fail
    Status e = std::exchange(write_back_error_, Status::Ok());
    Rollback().IgnoreError();
    return e;
  }
  // The rest of the host part crosses now, as the serial step copies it (unless the reducer
  // reduced into host_grad itself: then it is there once the reduce streams are synchronized).
  if (o_.device_grad == nullptr) return Status::Ok();
  const double t = SteadyNowMs();
  for (size_t g = 0; g < o_.sub_groups.size(); ++g) {
    const SubGroup& sg = o_.sub_groups[g];
    if (sg.flat_begin < o_.host_begin || copied_[g]) continue;
    STRATA_RETURN_IF_ERROR(stream.CopyAsync(o_.host_grad + (sg.flat_begin - o_.host_begin),
                                            o_.device_grad + sg.flat_begin,
                                            Numel(g) * sizeof(float), CopyKind::kDeviceToHost));
  }
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  b->d2h_ms += SteadyNowMs() - t;
  b->d2h_bytes += (o_.layout->partition_numel() - o_.host_begin) * sizeof(float);
  return Status::Ok();
}

Status StepOverlap::Resolve(const OverlapStepArgs& args, std::vector<char>* done) {
  done->assign(o_.sub_groups.size(), 0);
  if (!active_) return Status::Ok();
  const bool same = args.step == args_.step && SameHyperparams(args.hp, args_.hp) &&
                    SameBits(args.grad_scale, args_.grad_scale);
  if (!same) return Rollback();
  rolled_back_ = false;
  {
    std::lock_guard lock(mu_);
    *done = done_;
    for (auto& k : kept_) k.reset();
  }
  active_ = false;
  return Status::Ok();
}

Status StepOverlap::Rollback() {
  if (!active_) return Status::Ok();
  active_ = false;
  rolled_back_ = true;
  // Parameters written into param_store during backward are rewritten below from the restored
  // param_copy: a skipped step (an overflow) never reaches the step's own write-back.
  std::vector<char> written;
  written.swap(params_written_);
  written.resize(o_.sub_groups.size(), 0);
  std::vector<char> done;
  std::vector<std::unique_ptr<Kept>> kept;
  {
    std::lock_guard lock(mu_);
    done = done_;
    kept.swap(kept_);
    kept_.resize(done.size());
    std::fill(done_.begin(), done_.end(), 0);
  }
  const size_t cbytes = DTypeBytes(o_.copy_dtype);
  for (size_t g = 0; g < done.size(); ++g) {
    if (!done[g]) continue;
    if (kept[g] == nullptr) {
      return InternalError("overlapped step: sub-group " + std::to_string(g) +
                           " was updated early without a kept copy and cannot be rolled back");
    }
    const SubGroup& sg = o_.sub_groups[g];
    const size_t n = Numel(g);
    std::span<const float> k(kept[g]->state);
    if (o_.cpu_opt != nullptr) {
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Write(OptimizerState::Array::kMaster, sg.flat_begin, k.subspan(0, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Write(OptimizerState::Array::kExpAvg, sg.flat_begin, k.subspan(n, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Write(OptimizerState::Array::kExpAvgSq, sg.flat_begin, k.subspan(2 * n, n)));
    } else {  // into its swap buffer, written in the background (the serial step uses it)
      const int i = static_cast<int>(g);
      Result<OptimizerSwapper::StateView> v = o_.nvme_opt->AcquireState(i, {}, false);
      if (!v.ok()) {
        return v.status().WithContext("overlapped step: restoring sub-group " + std::to_string(g));
      }
      std::memcpy(v->params, k.data(), n * sizeof(float));
      std::memcpy(v->exp_avg, k.data() + n, n * sizeof(float));
      std::memcpy(v->exp_avg_sq, k.data() + 2 * n, n * sizeof(float));
      STRATA_RETURN_IF_ERROR(o_.nvme_opt->WriteBack(i).WithContext(
          "overlapped step: restoring sub-group " + std::to_string(g)));
    }
    if (ring()) {  // the old parameters are the kept master rounded (StepOverlapOptions)
      {
        std::lock_guard lock(mu_);
        FreeRingLocked(g);
      }
      if (written[g] != 0) {
        STRATA_RETURN_IF_ERROR(WriteShardsFromMaster(k.data(), sg.flat_begin, n, o_.copy_dtype,
                                                     *o_.param_store, copy_stream_)
                                   .WithContext("overlapped step: restoring sub-group " +
                                                std::to_string(g) + "'s parameters"));
      }
      continue;
    }
    if (o_.param_copy != nullptr && !kept[g]->copy.empty()) {
      std::memcpy(static_cast<uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes,
                  kept[g]->copy.data(), n * cbytes);
    }
    if (written[g] != 0 && o_.param_store != nullptr && o_.param_copy != nullptr) {
      STRATA_RETURN_IF_ERROR(
          o_.param_store
              ->Write(sg.flat_begin,
                      static_cast<const uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes, n,
                      copy_stream_)
              .WithContext("overlapped step: restoring sub-group " + std::to_string(g) +
                           "'s parameters"));
    }
  }
  return Status::Ok();
}

}  // namespace strata
