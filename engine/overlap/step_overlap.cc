#include "engine/overlap/step_overlap.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "engine/base/trace.h"
#include "engine/zero/zero3_shards.h"

namespace strata {

namespace {

bool SameHyperparams(const Hyperparams& a, const Hyperparams& b) {
  return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.adam_w_mode == b.adam_w_mode &&
         a.bias_correction == b.bias_correction;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

double StepOverlap::NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<std::unique_ptr<StepOverlap>> StepOverlap::Create(StepOverlapOptions options) {
  // No host array at all when the reducer adds into the NVMe optimizer's gradient region.
  const bool region = options.nvme_opt != nullptr && options.nvme_opt->grad_region() != nullptr;
  if (options.device == nullptr || options.layout == nullptr ||
      (options.host_grad == nullptr && !(region && options.device_grad == nullptr)) ||
      (options.cpu_opt == nullptr) == (options.nvme_opt == nullptr)) {
    return InvalidArgumentError(
        "overlapped step: device, layout, host gradients and exactly one optimizer state (cpu or "
        "nvme) are required");
  }
  std::unique_ptr<StepOverlap> o(new StepOverlap(std::move(options)));
  const StepOverlapOptions& op = o->o_;
  const size_t slices = op.layout->slices().size();
  o->groups_of_slice_.assign(slices, {0, 0});
  o->eligible_.assign(op.sub_groups.size(), 0);
  for (size_t g = 0; g < op.sub_groups.size(); ++g) {
    const SubGroup& sg = op.sub_groups[g];
    if (sg.end_slice > slices) {
      return InvalidArgumentError("overlapped step: sub-group " + std::to_string(g) +
                                  " ends at slice " + std::to_string(sg.end_slice) + " of " +
                                  std::to_string(slices));
    }
    for (size_t s = sg.first_slice; s < sg.end_slice; ++s) {
      auto& r = o->groups_of_slice_[s];
      if (r.first == r.second) r.first = g;  // groups come in order: a contiguous run
      r.second = g + 1;
    }
    o->eligible_[g] = sg.flat_begin >= op.host_begin && sg.flat_end > sg.flat_begin &&
                      sg.end_slice > sg.first_slice;
  }
  STRATA_ASSIGN_OR_RETURN(o->copy_stream_, op.device->CreateStream());
  EventOptions eo;
  eo.timing = false;
  STRATA_ASSIGN_OR_RETURN(o->reduced_, op.device->CreateEvent(eo));
  STRATA_ASSIGN_OR_RETURN(o->copies_done_, op.device->CreateEvent(eo));
  const size_t n = op.sub_groups.size();
  o->done_.assign(n, 0);
  o->kept_.resize(n);
  o->ring_of_.assign(n, -1);
  if (op.param_store != nullptr && op.param_copy == nullptr) {
    if (op.nvme_opt == nullptr || op.copy_buffers < 1) {
      return InvalidArgumentError(
          "overlapped step: writing parameters back without param_copy needs the NVMe optimizer "
          "state and at least one copy buffer");
    }
    size_t largest = 1;
    for (size_t g = 0; g < n; ++g) largest = std::max(largest, o->Numel(g));
    PinnedPoolOptions po;
    po.buffer_bytes = std::max<size_t>(largest * DTypeBytes(op.copy_dtype), 64);
    po.buffer_count = op.copy_buffers;
    po.lock = false;  // the store copies them into its own (pinned) swap buffers
    po.device = op.device;
    po.budget = op.budget;
    po.name = "overlapped step: updated parameter buffers";
    STRATA_ASSIGN_OR_RETURN(o->ring_pool_, PinnedPool::Create(po));
    for (size_t b = 0; b < op.copy_buffers; ++b) {
      o->ring_.push_back(o->ring_pool_->Acquire());
      o->ring_free_.push_back(static_cast<int>(b));
    }
  }
  o->worker_ = std::thread([p = o.get()] { p->WorkerLoop(); });
  pthread_setname_np(o->worker_.native_handle(), "strata-optim");
  if (op.nvme_opt != nullptr) op.nvme_opt->set_drain_hook([p = o.get()] { p->PauseWorker(); });
  return o;
}

StepOverlap::~StepOverlap() {
  if (o_.nvme_opt != nullptr) o_.nvme_opt->set_drain_hook(nullptr);
  if (copy_stream_.valid()) copy_stream_.Synchronize().IgnoreError();  // host functions ran
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (copy_stream_.valid()) o_.device->DestroyStream(copy_stream_).IgnoreError();
}

uint64_t StepOverlap::KeptBytes(size_t g) const {
  const uint64_t n = Numel(g);
  return 3 * n * sizeof(float) + (o_.param_copy != nullptr ? n * DTypeBytes(o_.copy_dtype) : 0);
}

Status StepOverlap::Begin(const OverlapStepArgs& args) {
  if (active_) {
    return FailedPreconditionError(
        "engine: Backward at a gradient-accumulation boundary again before Step "
        "(strata.overlap_step updates the optimizer during the boundary backward; call Step "
        "after it, or set strata.overlap_step false)");
  }
  params_written_.clear();
  write_back_error_ = Status::Ok();
  // Note [Gradients of resident states] (grad_region.cc): held only for final updates (below).
  if (o_.nvme_opt != nullptr) o_.nvme_opt->set_hold_grads(false);
  // The norm's chunk sums of an earlier step that did not reach its norm (a failed step) are
  // stale: forgotten before the worker takes this step's.
  if (o_.nvme_opt != nullptr) o_.nvme_opt->ForgetGradChecks();
  // A speculation that failed last time (clipping triggered, an overflow) most likely fails
  // again: such steps run serially, with a retry every kRetryAfter steps.
  if (args.speculative && rolled_back_ && ++serial_since_rollback_ < kRetryAfter) {
    return Status::Ok();
  }
  // Note [No speculation over NVMe state with deferral]
  if (args.speculative && o_.nvme_opt != nullptr && defer_leftovers_) return Status::Ok();
  serial_since_rollback_ = 0;
  if (!step_started_) {
    if (o_.nvme_opt != nullptr) {
      STRATA_RETURN_IF_ERROR(o_.nvme_opt->PrepareSubGroupSteps().WithContext("overlapped step"));
    }
    std::lock_guard lock(mu_);
    ResetStepLocked();
  }
  args_ = args;
  remaining_.assign(o_.sub_groups.size(), 0);
  for (size_t g = 0; g < o_.sub_groups.size(); ++g) {
    remaining_[g] = o_.sub_groups[g].end_slice - o_.sub_groups[g].first_slice;
  }
  unqueued_ = remaining_;
  copied_.assign(o_.sub_groups.size(), 0);
  kept_bytes_ = 0;
  pushed_expected_ = 0;
  {
    std::lock_guard lock(mu_);
    read_ahead_on_ = o_.nvme_opt != nullptr;
    kick_ = true;
  }
  backward_ended_.store(false);
  active_ = true;
  // The updates are final: the gradients of the sub-groups whose states are in the buffers stay
  // in memory for them (Note [Gradients of resident states] in grad_region.cc).
  if (o_.nvme_opt != nullptr && !args.speculative) o_.nvme_opt->set_hold_grads(true);
  cv_.notify_all();  // NVMe: read ahead
  return Status::Ok();
}

void StepOverlap::FreeRingLocked(size_t g) {
  if (ring_of_[g] < 0) return;
  ring_free_.push_back(ring_of_[g]);
  ring_of_[g] = -1;
  --ring_pending_;
}

void StepOverlap::ResetStepLocked() {
  for (size_t g = 0; g < ring_of_.size(); ++g) FreeRingLocked(g);
  std::fill(done_.begin(), done_.end(), 0);
  for (auto& k : kept_) k.reset();
  ready_.clear();
  processed_ = pushed_ = 0;
  error_ = Status::Ok();
  adam_ms_ = 0;
  in_order_ = false;
  step_started_ = true;
}

Status StepOverlap::StartReadAhead() {
  if (o_.nvme_opt == nullptr || active_) return Status::Ok();
  // Writes the stage and never-written sub-groups if any (else nothing): before the worker
  // owns the state.
  STRATA_RETURN_IF_ERROR(o_.nvme_opt->PrepareSubGroupSteps().WithContext("overlapped step"));
  {
    std::lock_guard lock(mu_);
    ResetStepLocked();
    read_ahead_on_ = true;
    kick_ = true;
  }
  cv_.notify_all();
  return Status::Ok();
}

void StepOverlap::PauseWorker() {
  std::unique_lock lock(mu_);
  read_ahead_on_ = false;
  done_cv_.wait(lock, [&] { return !busy_; });
}

Status StepOverlap::StopReadAhead(StepBreakdown* b) {
  step_started_ = false;  // the next Begin or StartReadAhead resets the step's state
  if (o_.nvme_opt == nullptr) return Status::Ok();
  Status error;
  {
    std::unique_lock lock(mu_);
    read_ahead_on_ = false;
    done_cv_.wait(lock, [&] { return !busy_; });
    if (!active_) error = error_;
  }
  const NvmeOptimizerState::AsyncStats st = o_.nvme_opt->TakeAsyncStats();
  b->nvme_read_bytes += st.bytes_read;
  b->nvme_write_bytes += st.bytes_written;
  return error.WithContext("overlapped step: NVMe read-ahead");
}

Status StepOverlap::WriteBackUpdated() {
  if (o_.param_store == nullptr || !active_) return Status::Ok();
  if (ring()) {  // each update in its copy buffer, handed on and freed
    params_written_.resize(o_.sub_groups.size(), 0);
    std::vector<std::pair<size_t, const uint8_t*>> todo;
    {
      std::lock_guard lock(mu_);
      for (size_t g = 0; g < done_.size(); ++g) {
        if (done_[g] != 0 && ring_of_[g] >= 0) {
          todo.emplace_back(g, ring_[static_cast<size_t>(ring_of_[g])].bytes());
        }
      }
    }
    Status first;
    for (const auto& [g, src] : todo) {
      Status w = first.ok() ? o_.param_store->Write(o_.sub_groups[g].flat_begin, src, Numel(g),
                                                    copy_stream_)
                            : Status::Ok();
      {
        // Freed even when the write failed (the step fails and rolls back): the worker must not
        // wait for it.
        std::lock_guard lock(mu_);
        FreeRingLocked(g);
      }
      cv_.notify_all();
      if (!w.ok()) {
        first = w.WithContext("overlapped step: writing back sub-group " + std::to_string(g) +
                              "'s parameters");
        continue;
      }
      if (first.ok()) {
        params_written_[g] = 1;
        ++param_write_backs_;
      }
    }
    return first;
  }
  if (o_.param_copy == nullptr) return Status::Ok();
  params_written_.resize(o_.sub_groups.size(), 0);
  std::vector<size_t> todo;
  {
    std::lock_guard lock(mu_);
    for (size_t g = 0; g < done_.size(); ++g) {
      if (done_[g] != 0 && params_written_[g] == 0) todo.push_back(g);
    }
  }
  // The worker finished these (done_ under mu_): their param_copy ranges are final unless rolled
  // back, and their parameters' last backward use has passed.
  const size_t cbytes = DTypeBytes(o_.copy_dtype);
  for (const size_t g : todo) {
    const SubGroup& sg = o_.sub_groups[g];
    const auto* src = static_cast<const uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes;
    STRATA_RETURN_IF_ERROR(o_.param_store->Write(sg.flat_begin, src, Numel(g), copy_stream_)
                               .WithContext("overlapped step: writing back sub-group " +
                                            std::to_string(g) + "'s parameters"));
    params_written_[g] = 1;
    ++param_write_backs_;
  }
  return Status::Ok();
}

Status StepOverlap::OnReduced(const Stream& stream, size_t param) {
  if (!active_ || param >= groups_of_slice_.size()) return Status::Ok();
  // A failed write-back is reported by Finish, which rolls the step back first.
  if (write_back_error_.ok()) write_back_error_ = WriteBackUpdated();
  const auto [first, end] = groups_of_slice_[param];
  for (size_t g = first; g < end; ++g) STRATA_RETURN_IF_ERROR(OnReducedGroup(stream, g));
  return Status::Ok();
}

Status StepOverlap::OnReducedGroup(const Stream& stream, size_t g) {
  if (remaining_[g] == 0 || --remaining_[g] != 0 || !eligible_[g]) return Status::Ok();
  if (args_.speculative) {  // the kept copies are bounded; the rest waits for the serial step
    const uint64_t kb = KeptBytes(g);
    if (kept_bytes_ + kb > o_.copy_limit_bytes) return Status::Ok();
    kept_bytes_ += kb;
  }
  const SubGroup& sg = o_.sub_groups[g];
  STRATA_RETURN_IF_ERROR(reduced_.Record(stream));
  STRATA_RETURN_IF_ERROR(copy_stream_.Wait(reduced_));
  if (o_.device_grad != nullptr) {  // else the reducer added into host_grad itself
    STRATA_RETURN_IF_ERROR(copy_stream_.CopyAsync(
        o_.host_grad + (sg.flat_begin - o_.host_begin), o_.device_grad + sg.flat_begin,
        Numel(g) * sizeof(float), CopyKind::kDeviceToHost));
  }
  const double queued_us = o_.tracer != nullptr && o_.tracer->enabled() ? o_.tracer->NowUs() : -1;
  STRATA_RETURN_IF_ERROR(copy_stream_.LaunchHostFunc([this, g, queued_us] {
    if (queued_us >= 0) {  // from the last gradient's reduce to the worker's queue
      const TraceArg args[] = {{"sub_group", static_cast<double>(g)}};
      o_.tracer->Complete(o_.tracer->Track("grads ready"), "sub-group gradients", "copy", queued_us,
                          o_.tracer->NowUs(), args);
    }
    Push(g);
  }));
  copied_[g] = 1;
  ++pushed_expected_;
  return Status::Ok();
}

bool StepOverlap::CompletesSubGroup(size_t param) {
  if (!active_ || param >= groups_of_slice_.size()) return false;
  bool completes = false;
  const auto [first, end] = groups_of_slice_[param];
  for (size_t g = first; g < end; ++g) {
    completes |= unqueued_[g] != 0 && --unqueued_[g] == 0 && eligible_[g];
  }
  return completes;
}

void StepOverlap::Push(size_t g) {
  {
    std::lock_guard lock(mu_);
    ready_.push_back(g);
    ++pushed_;
    kick_ = true;
  }
  cv_.notify_all();
}

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
  const double t = NowMs();
  for (size_t g = 0; g < o_.sub_groups.size(); ++g) {
    const SubGroup& sg = o_.sub_groups[g];
    if (sg.flat_begin < o_.host_begin || copied_[g]) continue;
    STRATA_RETURN_IF_ERROR(stream.CopyAsync(o_.host_grad + (sg.flat_begin - o_.host_begin),
                                            o_.device_grad + sg.flat_begin,
                                            Numel(g) * sizeof(float), CopyKind::kDeviceToHost));
  }
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  b->d2h_ms += NowMs() - t;
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
