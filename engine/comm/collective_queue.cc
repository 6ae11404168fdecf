#include "engine/comm/collective_queue.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace strata::internal {

using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kServiceInterval = std::chrono::milliseconds(20);
constexpr auto kYieldFor = std::chrono::milliseconds(2);        // yield-polling before sleeping
constexpr auto kMaxIdleSleep = std::chrono::microseconds(200);  // between polls after that

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}
}  // namespace

struct CollectiveQueue::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<QueuedOp>> waiting;  // enqueued, not started, call order
  bool stop = false;
  Status failed;
  std::atomic<uint64_t> enqueued{0}, started{0}, completed{0};
};

CollectiveQueue::CollectiveQueue(std::string name, double timeout_s, QueueHooks* hooks)
    : name_(std::move(name)),
      timeout_s_(timeout_s),
      hooks_(hooks),
      shared_(std::make_shared<Shared>()),
      last_completion_(Clock::now()) {
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), "strata-coll");
}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->cv.notify_all();
  thread_.join();
}

Status CollectiveQueue::status() const {
  std::lock_guard lock(shared_->mu);
  return shared_->failed;
}

uint64_t CollectiveQueue::NextSeq() const { return shared_->enqueued.load() + 1; }

QueueProgress CollectiveQueue::Progress() const {
  return {shared_->enqueued.load(), shared_->started.load(), shared_->completed.load()};
}

bool CollectiveQueue::FindDesc(uint64_t seq, CollectiveDesc* out) const {
  for (const auto& op : inflight_) {
    if (op->desc().seq == seq) return *out = op->desc(), true;
  }
  std::lock_guard lock(shared_->mu);
  for (const auto& op : shared_->waiting) {
    if (op->desc().seq == seq) return *out = op->desc(), true;
  }
  return false;
}

void CollectiveQueue::Complete(QueuedOp& op, Status status) {
  op.status_ = std::move(status);
  op.done_.store(true);
  op.done_.notify_all();
}

void CollectiveQueue::Push(std::shared_ptr<QueuedOp> op) {
  op->desc_.seq = shared_->enqueued.load() + 1;
  shared_->waiting.push_back(std::move(op));
  shared_->enqueued.fetch_add(1);
}

Status CollectiveQueue::Enqueue(const Stream& stream, std::shared_ptr<QueuedOp> op, Event* done) {
  // One caller at a time: seq order is call order. shared_->mu is held only briefly, never while
  // LaunchHostFunc may block on a full stream (whose worker needs it to mark ops ready).
  static_assert(sizeof(std::shared_ptr<Shared>) + sizeof(std::shared_ptr<QueuedOp>) <=
                HostTask::kInlineBytes);
  std::lock_guard order(enqueue_mu_);
  {
    std::lock_guard lock(shared_->mu);
    if (!shared_->failed.ok()) {
      return FailedPreconditionError(name_ + " failed earlier: " + shared_->failed.message());
    }
    Push(op);
  }
  Status launched = stream.LaunchHostFunc([shared = shared_, op]() -> Status {
    {
      std::lock_guard lock(shared->mu);
      op->ready_.store(true);
    }
    shared->cv.notify_all();
    op->done_.wait(false);
    return op->status_;
  });
  if (!launched.ok()) {
    std::lock_guard lock(shared_->mu);
    if (!shared_->waiting.empty() && shared_->waiting.back() == op) {
      shared_->waiting.pop_back();
      shared_->enqueued.fetch_sub(1);
    }
    return launched;
  }
  if (done != nullptr) return done->Record(stream);
  return Status::Ok();
}

Status CollectiveQueue::RunBlocking(std::shared_ptr<QueuedOp> op) {
  {
    std::lock_guard order(enqueue_mu_);
    std::lock_guard lock(shared_->mu);
    if (!shared_->failed.ok()) {
      return FailedPreconditionError(name_ + " failed earlier: " + shared_->failed.message());
    }
    op->ready_.store(true);
    Push(op);
  }
  shared_->cv.notify_all();
  op->done_.wait(false);
  return op->status_;
}

void CollectiveQueue::FailAll(const Status& error) {
  std::deque<std::shared_ptr<QueuedOp>> waiting;
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->failed.ok()) shared_->failed = error;
    waiting.swap(shared_->waiting);
  }
  hooks_->OnFailure(error);
  for (auto& op : inflight_) {
    op->Abandon();
    Complete(*op, error);
  }
  inflight_.clear();
  for (auto& op : waiting) Complete(*op, error);
}

void CollectiveQueue::Loop() {
  std::vector<std::shared_ptr<QueuedOp>> to_start;
  auto idle_since = Clock::now();  // the last completion (or the queue going idle)
  int64_t idle_sleep_us = 0;
  std::unique_lock lock(shared_->mu);
  while (true) {
    if (shared_->stop) {
      for (auto& op : shared_->waiting) {
        if (!op->ready_.load()) {
          Complete(*op, AbortedError(name_ + ": " + op->desc().ToString() +
                                     ": communicator destroyed before its stream reached it"));
        }
      }
      std::erase_if(shared_->waiting, [](const auto& op) { return op->done_.load(); });
      if (shared_->waiting.empty() && inflight_.empty()) break;
    }
    while (!shared_->waiting.empty() && shared_->waiting.front()->ready_.load()) {
      to_start.push_back(std::move(shared_->waiting.front()));
      shared_->waiting.pop_front();
    }
    const Status failed = shared_->failed;
    lock.unlock();

    if (!to_start.empty()) {
      idle_since = Clock::now();
      idle_sleep_us = 0;
    }
    for (auto& op : to_start) {
      op->start_time_ = Clock::now();
      shared_->started.store(op->desc().seq);
      if (!failed.ok()) {
        Complete(*op, failed);
        continue;
      }
      Status s = op->Start();
      if (!s.ok()) {
        Complete(*op, Status(s.code(), name_ + ": " + op->desc().ToString() + ": " + s.message()));
        FailAll(op->status_);
        continue;
      }
      inflight_.push_back(std::move(op));
    }
    to_start.clear();

    bool progressed = false;
    for (size_t i = 0; i < inflight_.size();) {
      QueuedOp& op = *inflight_[i];
      Result<bool> r = op.Poll();
      if (!r.ok()) {
        FailAll(Status(r.status().code(),
                       name_ + ": " + op.desc().ToString() + ": " + r.status().message()));
        break;
      }
      if (*r) {
        last_completion_ = Clock::now();
        shared_->completed.store(std::max(shared_->completed.load(), op.desc().seq));
        Complete(op, Status::Ok());
        inflight_.erase(inflight_.begin() + static_cast<std::ptrdiff_t>(i));
        progressed = true;
      } else {
        ++i;
      }
    }
    hooks_->Service();

    if (!inflight_.empty()) {
      const QueuedOp& oldest = *inflight_.front();
      const auto since = std::max(oldest.start_time_, last_completion_);
      const double stalled_s = std::chrono::duration<double>(Clock::now() - since).count();
      if (stalled_s > timeout_s_) {
        const std::string diagnosis = hooks_->DiagnoseTimeout(oldest.desc());
        FailAll(AbortedError(name_ + ": " + oldest.desc().ToString() + " made no progress for " +
                             Seconds(timeout_s_) + " s (strata.comm_timeout_s)" +
                             (diagnosis.empty() ? "" : ": " + diagnosis)));
      }
    }

    lock.lock();
    if (inflight_.empty()) {
      idle_since = Clock::now();
      idle_sleep_us = 0;
      shared_->cv.wait_for(lock, kServiceInterval, [this] {
        return shared_->stop ||
               (!shared_->waiting.empty() && shared_->waiting.front()->ready_.load());
      });
    } else if (progressed) {
      idle_since = Clock::now();
      idle_sleep_us = 0;
    } else if (Clock::now() - idle_since < kYieldFor) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    } else {
      // Polling without starving the CPU: a collective that waits for a peer may take long;
      // spinning on yield() then keeps this CPU busy, and kernel work queued on it (the
      // completion of an O_DIRECT write, say) can starve, so that a wait for a peer turns into a
      // cross-rank hang. After kYieldFor without a completion the thread sleeps between polls,
      // 25 us doubling up to kMaxIdleSleep (MPI without async progress advances a collective only
      // in its polls, so the sleep stays short), woken early by a newly ready op.
      idle_sleep_us =
          std::min<int64_t>(idle_sleep_us == 0 ? 25 : 2 * idle_sleep_us, kMaxIdleSleep.count());
      shared_->cv.wait_for(lock, std::chrono::microseconds(idle_sleep_us), [this] {
        return shared_->stop ||
               (!shared_->waiting.empty() && shared_->waiting.front()->ready_.load());
      });
    }
  }
}

}  // namespace strata::internal
