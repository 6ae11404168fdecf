// HostStream: one HostDevice stream — an in-order queue drained by its own worker thread.
//
// The queue is a fixed ring (no allocation per op); Enqueue blocks while it is full, as CUDA's
// launch queue does. Each op gets a sequence number; the stream publishes how many ops have
// completed, which is all that events need (an event is "stream S reached op N"). Errors follow
// Note [Stream errors] in device.h: the first failure is kept with its sequence number, later
// ops are skipped (except frees and event markers), and waiters covering it get the error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "offload/device/api/host_task.h"
#include "offload/device/api/kernel_launch.h"
#include "offload/device/api/stream.h"
#include "offload/device/host/link_pacer.h"

namespace strata::internal {

class DeviceArena;
class HostStream;

// The state behind one Event handle. Slots are owned by the HostDevice and reused.
struct EventSlot {
  bool in_use = false;  // an Event handle holds it (guarded by the HostDevice's events lock)
  std::mutex mu;
  uint64_t generation = 0;       // bumped by every Record and by release
  HostStream* stream = nullptr;  // stream of the latest record; null if never recorded
  uint64_t seq = 0;              // op number of its marker on that stream
  bool timing = true;
  bool time_valid = false;  // the marker of `generation` has run
  Clock::time_point time{};
};

struct HostOp {
  enum class Type : uint8_t { kCopy, kHostFunc, kKernel, kMarker, kWait, kFree };
  Type type = Type::kMarker;
  // kCopy
  CopyKind copy_kind = CopyKind::kHostToHost;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t size_bytes = 0;
  Clock::time_point enqueued{};  // set by HostStream::Enqueue
  // kHostFunc
  HostTask task;
  // kKernel
  KernelLaunch kernel;
  // kMarker
  EventSlot* slot = nullptr;
  uint64_t generation = 0;
  // kWait
  HostStream* wait_stream = nullptr;
  uint64_t wait_seq = 0;
  // kFree: dst
};

class HostStream {
 public:
  struct Env {
    LinkPacer* h2d = nullptr;
    LinkPacer* d2h = nullptr;
    LinkPacer* d2d = nullptr;
    DeviceArena* arena = nullptr;
  };

  // Starts the worker thread.
  HostStream(const Env& env, size_t queue_capacity, uint64_t index, int priority);
  ~HostStream();  // Shutdown()
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  uint64_t index() const { return index_; }
  int priority() const { return priority_; }

  // Queues `op`; returns its sequence number. FailedPrecondition after Shutdown.
  Result<uint64_t> Enqueue(HostOp&& op);
  // Blocks until the ops queued so far are done; the sticky error, if any.
  Status Synchronize();
  Result<bool> Query();
  // Blocks until op `seq` is done; an error if op `seq` or an earlier one failed. `blocked`, if
  // given, says whether it had to wait.
  Status WaitFor(uint64_t seq, bool* blocked = nullptr);
  Result<bool> QueryUpTo(uint64_t seq);
  // Drains the queue, stops the worker, and refuses further work. Idempotent.
  Status Shutdown();

 private:
  void Run();
  Status Execute(HostOp& op);
  Status ExecuteCopy(const HostOp& op);
  // When a host function or kernel that began at `begin` ends, as the next copy's pacing sees it
  // (Note [Host work without the wake-up] in host_stream.cc).
  Clock::time_point EmulatedEnd(Clock::time_point enqueued, Clock::time_point begin) const;
  Status ErrorCovering(uint64_t seq) const;  // requires mu_

  const Env env_;
  const uint64_t index_;
  const int priority_;

  std::mutex mu_;
  std::condition_variable work_cv_;   // worker: queue non-empty or stopping
  std::condition_variable space_cv_;  // producers: queue not full
  std::condition_variable done_cv_;   // waiters: completed_ advanced
  std::vector<HostOp> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  int done_waiters_ = 0;
  bool stop_ = false;
  bool closed_ = false;
  Status error_;
  uint64_t error_seq_ = 0;  // 0: healthy
  uint64_t skipped_ = 0;

  // Worker-only: when the stream finished its previous op (Note [Pacing without drift]): a paced
  // copy's emulated end, else the real time a kernel, host function or blocking wait ended.
  Clock::time_point ready_time_{};

  std::thread worker_;
};

}  // namespace strata::internal
