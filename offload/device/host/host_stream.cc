#include "offload/device/host/host_stream.h"

#include <pthread.h>

#include <cstring>
#include <string>
#include <utility>

#include "offload/device/host/device_arena.h"
#include "offload/device/host/host_kernels.h"
#include "offload/device/host/streaming_copy.h"

namespace strata::internal {

HostStream::HostStream(const Env& env, size_t queue_capacity, uint64_t index, int priority)
    : env_(env),
      index_(index),
      priority_(priority),
      ring_(queue_capacity == 0 ? 1 : queue_capacity) {
  worker_ = std::thread([this] { Run(); });
  // Named for per-thread CPU accounting (top -H, /proc/<pid>/task/*/comm): at most 15 chars.
  pthread_setname_np(worker_.native_handle(), ("strata-strm-" + std::to_string(index_)).c_str());
}

HostStream::~HostStream() { Shutdown().IgnoreError(); }

Result<uint64_t> HostStream::Enqueue(HostOp&& op) {
  op.enqueued = Clock::now();
  std::unique_lock lock(mu_);
  if (closed_) {
    return FailedPreconditionError("stream " + std::to_string(index_) + " was destroyed");
  }
  space_cv_.wait(lock, [&] { return count_ < ring_.size(); });
  ring_[(head_ + count_) % ring_.size()] = std::move(op);
  ++count_;
  const uint64_t seq = ++submitted_;
  if (count_ == 1) work_cv_.notify_one();
  return seq;
}

Status HostStream::ErrorCovering(uint64_t seq) const {
  if (error_seq_ != 0 && error_seq_ <= seq) return error_;
  return Status::Ok();
}

Status HostStream::WaitFor(uint64_t seq, bool* blocked) {
  std::unique_lock lock(mu_);
  if (blocked != nullptr) *blocked = completed_ < seq;
  if (completed_ < seq) {
    ++done_waiters_;
    done_cv_.wait(lock, [&] { return completed_ >= seq; });
    --done_waiters_;
  }
  return ErrorCovering(seq);
}

Result<bool> HostStream::QueryUpTo(uint64_t seq) {
  std::lock_guard lock(mu_);
  if (completed_ < seq) return false;
  STRATA_RETURN_IF_ERROR(ErrorCovering(seq));
  return true;
}

Status HostStream::Synchronize() {
  uint64_t target;
  {
    std::lock_guard lock(mu_);
    target = submitted_;
  }
  STRATA_RETURN_IF_ERROR(WaitFor(target));
  std::lock_guard lock(mu_);
  return error_;  // sticky: a failure after `target` is reported too
}

Result<bool> HostStream::Query() {
  std::lock_guard lock(mu_);
  if (!error_.ok()) return error_;
  return completed_ >= submitted_;
}

Status HostStream::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return error_;
    closed_ = true;  // no new work; the worker drains what is queued
    stop_ = true;
    work_cv_.notify_one();
  }
  if (worker_.joinable()) worker_.join();
  std::lock_guard lock(mu_);
  return error_;
}

void HostStream::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return count_ > 0 || stop_; });
    if (count_ == 0) break;  // stop_ and drained
    HostOp op = std::move(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    if (count_-- == ring_.size()) space_cv_.notify_all();
    const uint64_t seq = completed_ + 1;
    const bool failed = error_seq_ != 0;
    lock.unlock();

    Status status;
    const bool always_runs = op.type == HostOp::Type::kMarker || op.type == HostOp::Type::kFree;
    if (!failed || always_runs) status = Execute(op);
    op.task.Reset();  // run the capture's destructor outside the lock

    lock.lock();
    if (failed && !always_runs) ++skipped_;
    if (!status.ok() && error_seq_ == 0) {
      error_ =
          status.WithContext("stream " + std::to_string(index_) + " op " + std::to_string(seq));
      error_seq_ = seq;
    }
    completed_ = seq;
    if (done_waiters_ > 0) done_cv_.notify_all();
  }
}

Status HostStream::ExecuteCopy(const HostOp& op) {
  if (op.size_bytes != 0 && op.dst != op.src) {
    const auto* s = static_cast<const uint8_t*>(op.src);
    const auto* d = static_cast<const uint8_t*>(op.dst);
    const bool overlap = d < s + op.size_bytes && s < d + op.size_bytes;
    if (overlap || op.copy_kind == CopyKind::kHostToHost) {
      std::memmove(op.dst, op.src, op.size_bytes);
    } else {  // the link (or the device's own) copy: Note [Streaming copies]
      StreamingCopy(op.dst, op.src, op.size_bytes);
    }
  }
  LinkPacer* pacer = nullptr;
  switch (op.copy_kind) {
    case CopyKind::kHostToDevice:
      pacer = env_.h2d;
      break;
    case CopyKind::kDeviceToHost:
      pacer = env_.d2h;
      break;
    case CopyKind::kDeviceToDevice:
      pacer = env_.d2d;
      break;
    case CopyKind::kHostToHost:
      break;
  }
  if (pacer == nullptr || !pacer->throttled()) {
    ready_time_ = Clock::now();
    return Status::Ok();
  }
  // Note [Pacing without drift]: the copy starts once it is enqueued and the stream's previous
  // op (a copy, a kernel, a wait for another stream's event) is done, and the link is free.
  const Clock::time_point start = std::max(op.enqueued, ready_time_);
  const Clock::time_point end = pacer->Reserve(start, op.size_bytes);
  std::this_thread::sleep_until(end);
  ready_time_ = end;
  return Status::Ok();
}

// Note [Host work without the wake-up]
// A host function or kernel starts, on a real device, when the op before it ends and it has been
// enqueued; here the stream's thread runs it after waking from a paced copy's sleep (or from
// waiting for work), tens of microseconds late. Taking its real end as the stream's ready time
// charged that wake-up to the next copy: in bench/overlap every gather is a few stream ops around
// one paced copy, and the gather stream lost ~0.08 ms per parameter (~10 ms a step at 114
// gathers). So, as for copies (Note [Pacing without drift]), the op is taken to start at
// max(enqueued, the previous op's end) - never later than it really started - and to last its
// real duration. Only the next copy's pacing uses this time; nothing here waits for it.
Clock::time_point HostStream::EmulatedEnd(Clock::time_point enqueued,
                                          Clock::time_point begin) const {
  const Clock::time_point start = std::min(begin, std::max(ready_time_, enqueued));
  return start + (Clock::now() - begin);
}

Status HostStream::Execute(HostOp& op) {
  switch (op.type) {
    case HostOp::Type::kCopy:
      return ExecuteCopy(op);
    case HostOp::Type::kHostFunc: {
      const Clock::time_point begin = Clock::now();
      Status s = op.task();
      ready_time_ = EmulatedEnd(op.enqueued, begin);
      return s;
    }
    case HostOp::Type::kKernel: {
      const Clock::time_point begin = Clock::now();
      Status s = RunHostKernel(op.kernel);
      ready_time_ = EmulatedEnd(op.enqueued, begin);
      return s;
    }
    case HostOp::Type::kMarker: {
      const Clock::time_point now = Clock::now();
      std::lock_guard lock(op.slot->mu);
      if (op.slot->generation == op.generation) {
        op.slot->time = now;
        op.slot->time_valid = true;
      }
      return Status::Ok();
    }
    case HostOp::Type::kWait: {
      // A wait that blocks ends the stream's previous op now; one already satisfied does not
      // (its copies keep their emulated start, without the wake-up's oversleep).
      bool blocked = false;
      Status s = op.wait_stream->WaitFor(op.wait_seq, &blocked);
      if (blocked) ready_time_ = std::max(ready_time_, Clock::now());
      if (!s.ok()) {
        return s.WithContext("waiting on an event of stream " +
                             std::to_string(op.wait_stream->index()));
      }
      return Status::Ok();
    }
    case HostOp::Type::kFree:
      return env_.arena->Free(op.dst).WithContext("FreeAsync");
  }
  return InternalError("unknown host op");
}

}  // namespace strata::internal
