// CollectiveQueue: the progress thread behind the mpi and nccl backends. It issues collectives in
// call order once their stream reaches them, drives them to completion, and is the watchdog that
// turns "no progress for timeout_s" into an error naming the collective and the missing ranks.
// Internal to engine/comm.
//
// Note [Collectives on a stream]
// Enqueue puts a host task on the caller's stream: when the stream reaches it, the task marks the
// op ready and blocks that stream until the op completes, returning its Status (so a failure is
// the stream's error, Note [Stream errors]). The progress thread starts ready ops strictly in call
// order (op k+1 never starts before op k, whatever streams they are on: all ranks must issue in
// the same order) and polls every started one; several may be in flight. It also calls
// QueueHooks::Service at least every 20 ms, idle or not, so peers' health queries get answers.
// The watchdog: when started ops exist and none completed for timeout_s (counted from the later
// of the oldest one's start and the last completion), the oldest fails with Aborted and a
// diagnosis from QueueHooks::DiagnoseTimeout; then the queue is failed: every op, queued or in
// flight, completes with that error and Enqueue refuses new ones.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/comm/collective.h"
#include "offload/device/api/stream.h"

namespace strata::internal {

// One collective as a backend runs it. Start/Poll/Abandon run on the progress thread only.
class QueuedOp {
 public:
  explicit QueuedOp(const CollectiveDesc& desc) : desc_(desc) {}
  virtual ~QueuedOp() = default;
  const CollectiveDesc& desc() const { return desc_; }

  // Issues the (non-blocking) work. An error fails the queue.
  virtual Status Start() = 0;
  // true once complete. An error fails the queue.
  virtual Result<bool> Poll() = 0;
  // The op failed or timed out after Start: release what can be released (requests may leak).
  virtual void Abandon() {}

 private:
  friend class CollectiveQueue;
  CollectiveDesc desc_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> done_{false};
  Status status_;  // written before done_ is set
  std::chrono::steady_clock::time_point start_time_;
};

// Note [Issue order with size checks]
// With CommOptions::check_sizes an op first exchanges its shape (SizeCheck, Start) and issues its
// collective only in Poll, once every rank's shape is known. The queue starts ops in seq order, but
// a later op's check may finish while an earlier op (on another stream) is still checking, and
// each rank sees that at a different moment; a backend must still issue its collectives in seq
// order on every rank, or ranks pair different collectives (OpenMPI: "NBC_Progress error 15",
// MPI_ERR_TRUNCATE, then an abort). So an op issues its collective only once every earlier op has
// issued its own: IssueOrder is that gate. The checks themselves run on a communicator of their
// own (in seq order there too, as the queue starts them).
class IssueOrder {
 public:
  // True when op `seq` may issue its collective now (every op before it has).
  bool MayIssue(uint64_t seq) const { return seq == issued_ + 1; }
  void Issued(uint64_t seq) { issued_ = seq; }

 private:
  uint64_t issued_ = 0;  // progress thread only
};

// Backend hooks, called on the progress thread.
class QueueHooks {
 public:
  virtual ~QueueHooks() = default;
  // Answers peers (health queries); called at least every 20 ms.
  virtual void Service() {}
  // A sentence about the other ranks for a timed-out `op` (who never arrived, who differs).
  virtual std::string DiagnoseTimeout(const CollectiveDesc& /*op*/) { return ""; }
  // The queue failed (e.g. abort a NCCL communicator so its kernels return).
  virtual void OnFailure(const Status& /*error*/) {}
};

// What this rank has done, for peers' health queries.
struct QueueProgress {
  uint64_t enqueued = 0;   // highest seq enqueued
  uint64_t started = 0;    // highest seq started
  uint64_t completed = 0;  // highest seq completed
};

class CollectiveQueue {
 public:
  // `name` prefixes errors ("comm mpi (rank 0 of 3)"). `hooks` must outlive the queue.
  CollectiveQueue(std::string name, double timeout_s, QueueHooks* hooks);
  // Fails ops not yet started (Aborted), waits for started ones (bounded by the timeout).
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  const std::string& name() const { return name_; }
  double timeout_s() const { return timeout_s_; }
  // OK, or the error that failed the queue.
  Status status() const;

  // Gives `op` the next seq (its desc().seq), puts its host task on `stream` and records `done`.
  // FailedPrecondition if the queue has failed.
  Status Enqueue(const Stream& stream, std::shared_ptr<QueuedOp> op, Event* done);
  // Runs `op` in call order without a stream, blocking the caller until it completes (Split).
  Status RunBlocking(std::shared_ptr<QueuedOp> op);
  // The next seq Enqueue/RunBlocking will assign (to build the desc before enqueueing).
  uint64_t NextSeq() const;

  // Progress thread only (hooks): this rank's counters and the desc of op `seq` if it is still
  // queued or in flight.
  QueueProgress Progress() const;
  bool FindDesc(uint64_t seq, CollectiveDesc* out) const;

 private:
  struct Shared;
  void Loop();
  void Push(std::shared_ptr<QueuedOp> op);
  void FailAll(const Status& error);  // progress thread
  static void Complete(QueuedOp& op, Status status);

  const std::string name_;
  const double timeout_s_;
  QueueHooks* const hooks_;
  std::mutex enqueue_mu_;                            // orders Enqueue/RunBlocking calls
  std::shared_ptr<Shared> shared_;                   // also held by host tasks still on streams
  std::vector<std::shared_ptr<QueuedOp>> inflight_;  // progress thread only
  std::chrono::steady_clock::time_point last_completion_;
  std::thread thread_;
};

}  // namespace strata::internal
