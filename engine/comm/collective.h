// CollectiveDesc: one collective as every backend sees it — what, in which order, on what
// buffers — plus the argument checks all backends share and the byte counts they stage.
// Internal to engine/comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/comm/communicator.h"

namespace strata::internal {

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint64_t seq = 0;  // 1-based call order on its communicator (0 = not yet enqueued)
  DType dtype = DType::kFloat32;
  size_t numel = 0;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  double predivide_factor = 1.0;

  // "all_reduce #12 (fp32, 1000 elements, sum)".
  std::string ToString() const;
  // Same kind, dtype, numel, op and root (what must agree across ranks).
  bool SameShape(const CollectiveDesc& o) const;
};

// Buffers of one call, as given.
struct CollectiveBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
};

// Bytes read from `send` and written to `recv` by a collective on `world` ranks.
size_t SendBytes(const CollectiveDesc& d, int world);
size_t RecvBytes(const CollectiveDesc& d, int world);

// The checks every backend makes before enqueueing (InvalidArgument naming the argument): a valid
// stream, the same device for `done`, non-null buffers for numel > 0, a root in range, a finite
// predivide factor > 0, send and recv either identical (in place) or apart, except for the
// AllGather in-place layout (send == recv + rank * shard).
Status ValidateCollective(const char* backend, const CollectiveDesc& d, const CollectiveBuffers& b,
                          int rank, int world, const Stream& stream, const Event* done);

// A Communicator whose five collectives are one described request each: backends implement
// Submit (validate, enqueue on the stream, record `done`) and inherit the rest.
class DescribedCommunicator : public Communicator {
 public:
  Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                   DType dtype, Event* done) override {
    return Submit({CollectiveKind::kAllGather, 0, dtype, numel}, send_shard, recv, stream, done);
  }
  Status ReduceScatter(const Stream& stream, const void* send, void* recv_shard, size_t numel,
                       DType dtype, const ReduceScatterOptions& options, Event* done) override {
    CollectiveDesc d{CollectiveKind::kReduceScatter, 0, dtype, numel};
    d.predivide_factor = options.predivide_factor;
    return Submit(d, send, recv_shard, stream, done);
  }
  Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel, DType dtype,
                   ReduceOp op, Event* done) override {
    return Submit({CollectiveKind::kAllReduce, 0, dtype, numel, op}, send, recv, stream, done);
  }
  Status Broadcast(const Stream& stream, void* buffer, size_t numel, DType dtype, int root,
                   Event* done) override {
    CollectiveDesc d{CollectiveKind::kBroadcast, 0, dtype, numel};
    d.root = root;
    return Submit(d, buffer, buffer, stream, done);
  }
  Status Barrier(const Stream& stream, Event* done) override {
    return Submit({CollectiveKind::kBarrier}, nullptr, nullptr, stream, done);
  }

 protected:
  virtual Status Submit(const CollectiveDesc& d, const void* send, void* recv, const Stream& stream,
                        Event* done) = 0;
};

}  // namespace strata::internal
