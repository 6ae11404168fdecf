#include "engine/overlap/step_overlap.h"

#include <pthread.h>

#include <algorithm>
#include <string>
#include <utility>

#include "engine/base/trace.h"

namespace strata {

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

}  // namespace strata
