// TimedCommunicator: a CommunicatorWrapper that measures how long each collective occupies the
// stream it is enqueued on, by putting a host task before and after it. Streams are in order and
// each runs its tasks on one worker thread, so the pair brackets exactly the collective's work.
// The cost is two host tasks per collective (microseconds), the same for every variant.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/clock.h"
#include "engine/comm/communicator.h"

namespace strata::bench {

class TimedCommunicator final : public CommunicatorWrapper {
 public:
  using CommunicatorWrapper::CommunicatorWrapper;

  double busy_s() const { return static_cast<double>(busy_ns_.load()) * 1e-9; }
  int64_t calls() const { return calls_.load(); }
  void Reset() {
    busy_ns_ = 0;
    calls_ = 0;
  }

  Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                   DType dtype, Event* done) override {
    return Timed(stream, [&] {
      return CommunicatorWrapper::AllGather(stream, send_shard, recv, numel, dtype, done);
    });
  }
  Status ReduceScatter(const Stream& stream, const void* send, void* recv_shard, size_t numel,
                       DType dtype, const ReduceScatterOptions& options, Event* done) override {
    return Timed(stream, [&] {
      return CommunicatorWrapper::ReduceScatter(stream, send, recv_shard, numel, dtype, options,
                                                done);
    });
  }
  Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel, DType dtype,
                   ReduceOp op, Event* done) override {
    return Timed(stream, [&] {
      return CommunicatorWrapper::AllReduce(stream, send, recv, numel, dtype, op, done);
    });
  }
  Status Broadcast(const Stream& stream, void* buffer, size_t numel, DType dtype, int root,
                   Event* done) override {
    return Timed(stream, [&] {
      return CommunicatorWrapper::Broadcast(stream, buffer, numel, dtype, root, done);
    });
  }

 private:
  // The start time lives in a thread_local of the stream's worker: the end task of a collective
  // runs on the same worker, after it, before any later collective's start task.
  static int64_t& StartNs() {
    static thread_local int64_t start_ns = 0;
    return start_ns;
  }

  template <typename F>
  Status Timed(const Stream& stream, F&& enqueue) {
    STRATA_RETURN_IF_ERROR(stream.LaunchHostFunc([]() -> Status {
      StartNs() = SteadyNowNs();
      return Status::Ok();
    }));
    STRATA_RETURN_IF_ERROR(enqueue());
    ++calls_;
    std::atomic<int64_t>* busy = &busy_ns_;
    return stream.LaunchHostFunc([busy]() -> Status {
      busy->fetch_add(SteadyNowNs() - StartNs());
      return Status::Ok();
    });
  }

  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> calls_{0};
};

}  // namespace strata::bench
