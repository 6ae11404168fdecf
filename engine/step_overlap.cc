#include "engine/step_overlap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "engine/trace.h"

namespace strata {

namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool SameHyperparams(const Hyperparams& a, const Hyperparams& b) {
  return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.adam_w_mode == b.adam_w_mode &&
         a.bias_correction == b.bias_correction;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

Result<std::unique_ptr<StepOverlap>> StepOverlap::Create(StepOverlapOptions options) {
  if (options.device == nullptr || options.layout == nullptr || options.host_grad == nullptr ||
      (options.cpu_opt == nullptr) == (options.nvme_opt == nullptr)) {
    return InvalidArgumentError(
        "overlapped step: device, layout, host gradients and exactly one optimizer state (cpu or "
        "nvme) are required");
  }
  std::unique_ptr<StepOverlap> o(new StepOverlap(std::move(options)));
  const StepOverlapOptions& op = o->o_;
  const size_t slices = op.layout->slices().size();
  o->group_of_slice_.assign(slices, 0);
  o->eligible_.assign(op.sub_groups.size(), 0);
  for (size_t g = 0; g < op.sub_groups.size(); ++g) {
    const SubGroup& sg = op.sub_groups[g];
    if (sg.end_slice > slices) {
      return InvalidArgumentError("overlapped step: sub-group " + std::to_string(g) +
                                  " ends at slice " + std::to_string(sg.end_slice) + " of " +
                                  std::to_string(slices));
    }
    for (size_t s = sg.first_slice; s < sg.end_slice; ++s) o->group_of_slice_[s] = g;
    o->eligible_[g] = sg.flat_begin >= op.host_begin && sg.flat_end > sg.flat_begin &&
                      sg.end_slice > sg.first_slice;
  }
  STRATA_ASSIGN_OR_RETURN(o->copy_stream_, op.device->CreateStream());
  EventOptions eo;
  eo.timing = false;
  STRATA_ASSIGN_OR_RETURN(o->reduced_, op.device->CreateEvent(eo));
  const size_t n = op.sub_groups.size();
  o->done_.assign(n, 0);
  o->kept_.resize(n);
  o->read_ahead_.resize(n);
  o->reading_.assign(n, 0);
  o->worker_ = std::thread([p = o.get()] { p->WorkerLoop(); });
  return o;
}

StepOverlap::~StepOverlap() {
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
  // A speculation that failed last time (clipping triggered, an overflow) most likely fails
  // again: such steps run serially, with a retry every kRetryAfter steps.
  if (args.speculative && rolled_back_ && ++serial_since_rollback_ < kRetryAfter) {
    return Status::Ok();
  }
  serial_since_rollback_ = 0;
  args_ = args;
  remaining_.assign(o_.sub_groups.size(), 0);
  for (size_t g = 0; g < o_.sub_groups.size(); ++g) {
    remaining_[g] = o_.sub_groups[g].end_slice - o_.sub_groups[g].first_slice;
  }
  copied_.assign(o_.sub_groups.size(), 0);
  kept_bytes_ = 0;
  pushed_expected_ = 0;
  if (o_.nvme_opt != nullptr) {
    STRATA_RETURN_IF_ERROR(o_.nvme_opt->PrepareSubGroupSteps().WithContext("overlapped step"));
  }
  {
    std::lock_guard lock(mu_);
    std::fill(done_.begin(), done_.end(), 0);
    for (auto& k : kept_) k.reset();
    for (auto& r : read_ahead_) std::vector<float>().swap(r);
    std::fill(reading_.begin(), reading_.end(), 0);
    ready_.clear();
    processed_ = pushed_ = 0;
    error_ = Status::Ok();
    adam_ms_ = 0;
    nvme_read_bytes_ = nvme_write_bytes_ = 0;
    armed_ = true;
  }
  backward_ended_.store(false);
  active_ = true;
  cv_.notify_all();  // NVMe: read ahead
  return Status::Ok();
}

Status StepOverlap::OnReduced(const Stream& stream, size_t param) {
  if (!active_ || param >= group_of_slice_.size()) return Status::Ok();
  const size_t g = group_of_slice_[param];
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
  STRATA_RETURN_IF_ERROR(copy_stream_.LaunchHostFunc([this, g] { Push(g); }));
  copied_[g] = 1;
  ++pushed_expected_;
  return Status::Ok();
}

void StepOverlap::Push(size_t g) {
  {
    std::lock_guard lock(mu_);
    ready_.push_back(g);
    ++pushed_;
  }
  cv_.notify_all();
}

void StepOverlap::WorkerLoop() {
  if (o_.tracer != nullptr) o_.tracer->NameThisThread("adam overlap");
  std::unique_lock lock(mu_);
  // NVMe: the next sub-group to read ahead — the last not yet read (backward reaches the last
  // parameters first) — or -1.
  auto next_read_ahead = [&]() -> int {
    if (o_.nvme_opt == nullptr || !armed_ || !error_.ok()) return -1;
    int unconsumed = 0;
    for (const auto& r : read_ahead_) unconsumed += r.empty() ? 0 : 1;
    if (unconsumed >= kReadAhead) return -1;
    for (size_t g = eligible_.size(); g-- > 0;) {
      if (eligible_[g] && !reading_[g] && !done_[g]) return static_cast<int>(g);
    }
    return -1;
  };
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !ready_.empty() || next_read_ahead() >= 0; });
    if (stop_) return;
    busy_ = true;
    if (!ready_.empty()) {
      const size_t g = ready_.front();
      ready_.pop_front();
      reading_[g] = 1;
      std::vector<float> state = std::move(read_ahead_[g]);
      read_ahead_[g].clear();
      const bool failed = !error_.ok();
      lock.unlock();
      Status s = failed ? Status::Ok() : UpdateOne(g, &state);
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
      ++processed_;
    } else {
      const size_t g = static_cast<size_t>(next_read_ahead());
      reading_[g] = 1;
      lock.unlock();
      std::vector<float> state;
      Status s = ReadNvme(g, &state);
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
      if (s.ok() && armed_ && !done_[g]) read_ahead_[g] = std::move(state);
    }
    busy_ = false;
    done_cv_.notify_all();
  }
}

Status StepOverlap::ReadNvme(size_t g, std::vector<float>* state) {
  const size_t n = Numel(g);
  state->resize(3 * n);
  float* p = state->data();
  STRATA_RETURN_IF_ERROR(o_.nvme_opt->ReadSubGroup(static_cast<int>(g), p, p + n, p + 2 * n)
                             .WithContext("overlapped step: read sub-group " + std::to_string(g)));
  std::lock_guard lock(mu_);
  nvme_read_bytes_ += 3 * n * sizeof(float);
  return Status::Ok();
}

// Runs on the worker thread, with the sub-group's gradients on the host.
Status StepOverlap::UpdateOne(size_t g, std::vector<float>* state) {
  const SubGroup& sg = o_.sub_groups[g];
  const size_t n = Numel(g);
  const double t0 = NowMs();
  const double trace_begin = o_.tracer != nullptr ? o_.tracer->NowUs() : 0;
  std::unique_ptr<Kept> kept;
  if (args_.speculative) kept = std::make_unique<Kept>();
  const size_t cbytes = DTypeBytes(o_.copy_dtype);
  uint8_t* copy = o_.param_copy == nullptr
                      ? nullptr
                      : static_cast<uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes;
  if (kept != nullptr && copy != nullptr) kept->copy.assign(copy, copy + n * cbytes);
  if (o_.cpu_opt != nullptr) {
    if (kept != nullptr) {
      kept->state.resize(3 * n);
      std::span<float> k(kept->state);
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kMaster, sg.flat_begin, k.subspan(0, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kExpAvg, sg.flat_begin, k.subspan(n, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kExpAvgSq, sg.flat_begin, k.subspan(2 * n, n)));
    }
    STRATA_RETURN_IF_ERROR(
        o_.cpu_opt
            ->StepSubGroup(sg, args_.step, args_.hp, args_.grad_scale, o_.param_copy, o_.copy_dtype)
            .WithContext("overlapped step: sub-group " + std::to_string(g)));
  } else {
    if (state->empty()) STRATA_RETURN_IF_ERROR(ReadNvme(g, state));
    if (kept != nullptr) kept->state = *state;
    float* p = state->data();
    const int i = static_cast<int>(g);
    STRATA_RETURN_IF_ERROR(o_.nvme_opt->UpdateSubGroup(i, args_.step, args_.hp, args_.grad_scale, p,
                                                       p + n, p + 2 * n, o_.param_copy,
                                                       o_.copy_dtype));
    STRATA_RETURN_IF_ERROR(o_.nvme_opt->WriteSubGroup(i, p, p + n, p + 2 * n));
  }
  const double ms = NowMs() - t0;
  if (o_.tracer != nullptr && o_.tracer->enabled()) {
    const TraceArg args[] = {{"sub_group", static_cast<double>(g)}};
    o_.tracer->Complete("overlapped sub-group", "optimizer", trace_begin, o_.tracer->NowUs(), args);
  }
  {
    std::lock_guard lock(mu_);
    kept_[g] = std::move(kept);
    done_[g] = 1;
    adam_ms_ += ms;
    if (o_.nvme_opt != nullptr) nvme_write_bytes_ += 3 * n * sizeof(float);
  }
  overlapped_.fetch_add(1);
  if (!backward_ended_.load()) early_.fetch_add(1);
  return Status::Ok();
}

Status StepOverlap::Finish(const Stream& stream, StepBreakdown* b) {
  if (!active_) return Status::Ok();
  Status s = copy_stream_.Synchronize();  // every copy done, every host function run
  Status worker;
  {
    std::unique_lock lock(mu_);
    armed_ = false;  // no more reads ahead
    done_cv_.wait(lock, [&] { return (processed_ == pushed_ && !busy_) || !s.ok(); });
    if (!s.ok()) done_cv_.wait(lock, [&] { return !busy_; });
    worker = error_;
    for (auto& r : read_ahead_) std::vector<float>().swap(r);
    b->overlapped_adam_ms += adam_ms_;
    b->nvme_read_bytes += nvme_read_bytes_;
    b->nvme_write_bytes += nvme_write_bytes_;
  }
  if (!s.ok() || !worker.ok()) {  // the step fails; undo what can be undone
    Rollback().IgnoreError();
    return !s.ok() ? s.WithContext("overlapped step: gradient copies") : worker;
  }
  if (pushed_ != pushed_expected_) {
    return InternalError("overlapped step: " + std::to_string(pushed_) + " of " +
                         std::to_string(pushed_expected_) + " sub-groups reached the worker");
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
    } else {
      const float* p = k.data();
      STRATA_RETURN_IF_ERROR(
          o_.nvme_opt->WriteSubGroup(static_cast<int>(g), p, p + n, p + 2 * n)
              .WithContext("overlapped step: restoring sub-group " + std::to_string(g)));
    }
    if (o_.param_copy != nullptr && !kept[g]->copy.empty()) {
      std::memcpy(static_cast<uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes,
                  kept[g]->copy.data(), n * cbytes);
    }
  }
  return Status::Ok();
}

}  // namespace strata
