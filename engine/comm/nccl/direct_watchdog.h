// DirectWatchdog: the nccl backend's watchdog for collectives issued straight onto the callers'
// CUDA streams (size checks off). Internal to the nccl backend.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "engine/comm/collective.h"
#include "engine/comm/nccl/nccl_status.h"

namespace strata::internal {

// Note [Direct collectives]
// Without the size check (strata.comm_check_sizes off, the release default) a collective needs no
// host round trip, so it goes straight onto the caller's own cudaStream_t (CudaNativeStreamOf):
// issued at call time under a mutex (call order = issue order on every rank), ordered with the
// caller's other streams by its events, and `done` recorded right after it. No host wait per
// collective. What the progress thread did for queued ops is kept:
//   - the watchdog (DirectWatchdog) records a CUDA event after each collective and polls them; if
//     the oldest makes no progress for timeout_s it marks the communicator failed and aborts the
//     NCCL communicator, so the hung kernels return;
//   - a host function enqueued after each collective returns that failure, which makes it the
//     stream's error (Note [Stream errors]); it returns at once, it never waits.
// With the size check on, collectives go through CollectiveQueue as before (the agreement is an
// MPI exchange on the host).
class DirectWatchdog {
 public:
  DirectWatchdog(double timeout_s, std::string name)
      : timeout_s_(timeout_s), name_(std::move(name)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~DirectWatchdog() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (Pending& p : pending_) cudaEventDestroy(p.event);
  }

  // Called once the abort has to happen (the communicator aborts NCCL).
  void set_on_timeout(std::function<void(const Status&)> f) { on_timeout_ = std::move(f); }

  // The failure every later collective and host check reports (Ok while healthy). Shared with
  // the host functions on the callers' streams, which may run after the watchdog is gone.
  struct Failure {
    std::atomic<bool> failed{false};
    std::mutex mu;
    Status status;
    Status Get() {
      if (!failed.load()) return Status::Ok();
      std::lock_guard lock(mu);
      return status;
    }
  };
  Status status() const { return failure_->Get(); }
  std::shared_ptr<Failure> failure() const { return failure_; }

  // Records an event after `d` on `st` and watches it.
  Status Watch(const CollectiveDesc& d, cudaStream_t st) {
    cudaEvent_t ev = nullptr;
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    Status s = CudaStatus(cudaEventRecord(ev, st), "cudaEventRecord");
    if (!s.ok()) {
      cudaEventDestroy(ev);
      return s;
    }
    {
      std::lock_guard lock(mu_);
      pending_.push_back({ev, d, std::chrono::steady_clock::now()});
    }
    cv_.notify_all();
    return Status::Ok();
  }

 private:
  struct Pending {
    cudaEvent_t event;
    CollectiveDesc desc;
    std::chrono::steady_clock::time_point issued;
  };

  void Run() {
    auto last_progress = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      while (!pending_.empty()) {
        const cudaError_t q = cudaEventQuery(pending_.front().event);
        if (q == cudaErrorNotReady) break;
        cudaEventDestroy(pending_.front().event);
        pending_.pop_front();
        last_progress = std::chrono::steady_clock::now();
      }
      if (pending_.empty() || failure_->failed.load()) continue;
      const auto since = std::max(last_progress, pending_.front().issued);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      if (waited < timeout_s_) continue;
      const Status f = AbortedError(name_ + ": " + pending_.front().desc.ToString() +
                                    " made no progress for " + std::to_string(timeout_s_) +
                                    " s (strata.comm_timeout_s): a peer is missing or hung; the "
                                    "communicator is aborted");
      {
        std::lock_guard flock(failure_->mu);
        failure_->status = f;
      }
      failure_->failed.store(true);
      lock.unlock();
      if (on_timeout_) on_timeout_(f);
      lock.lock();
    }
  }

  const double timeout_s_;
  const std::string name_;
  std::function<void(const Status&)> on_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::shared_ptr<Failure> failure_ = std::make_shared<Failure>();
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace strata::internal
