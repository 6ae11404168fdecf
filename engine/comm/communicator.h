// Communicator: the collectives ZeRO is made of — all-gather of parameter shards, reduce-scatter
// of gradients, all-reduce of norms and overflow flags, broadcast of initial weights — on
// contiguous device buffers, each enqueued on a Device Stream so the engine overlaps them with
// compute. Shaped like LevelDB's Env: a small abstract class, `final` backends (local, mpi, nccl)
// made by CreateCommunicator() (engine/comm/registry.h), and a CommunicatorWrapper for test
// doubles.
//
// Buffers: `numel` elements of `dtype` (fp32, fp16, bf16) in memory of the stream's Device.
// fp16/bf16 sums are formed in fp32 and rounded once per reduction step.
//
// Sharded collectives and padding: a flat buffer of `numel` elements is split into world_size()
// shards of ShardNumel(numel, world_size()) elements; the last shards are padded (numel need not
// divide by the world size). AllGather reads this rank's shard and writes the `numel` elements of
// the whole; ReduceScatter reads the whole and writes this rank's shard, padding elements zero.
//
// Note [Collective semantics]
//   - Every rank calls the same collectives in the same order (the order of the calls, not of the
//     streams): the call order is the issue order, as with NCCL and MPI.
//   - A call validates its arguments and returns InvalidArgument at once; it returns
//     FailedPrecondition once the communicator has failed (see below). Otherwise the collective
//     runs when `stream` reaches it; later work on `stream` sees its result. If `done` is
//     non-null it is recorded on `stream` right after the collective (wait on it from other
//     streams, or Synchronize it). Buffers must stay valid until then.
//   - A collective that fails — a peer that exited or hangs (no progress within
//     CommOptions::timeout_s), sizes that differ across ranks (checked when
//     CommOptions::check_sizes), a transport error — becomes the stream's error (Note [Stream
//     errors] in offload/device/api/device.h): the stream and every event recorded after it report
//     a Status naming the collective and the ranks involved. The communicator is then failed: every
//     later call returns that error. Destroy it; a failed job is restarted, not repaired.
//
// Thread safety: every method may be called from any thread; calls are ordered by a mutex (their
// order is the issue order). The communicator must outlive the work enqueued through it; the
// destructor waits (bounded by the timeout) for collectives already started.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "offload/device/api/stream.h"

namespace strata {

enum class ReduceOp : uint8_t { kSum, kMax };
enum class CollectiveKind : uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier,
  kSplit,  // Communicator::Split, ordered with the collectives
};

// "sum", "max"; "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier", "split".
std::string_view ReduceOpName(ReduceOp op);
std::string_view CollectiveKindName(CollectiveKind kind);

// Elements per shard when `numel` is split over `world_size` ranks: ceil(numel / world_size).
constexpr size_t ShardNumel(size_t numel, int world_size) {
  const size_t w = world_size > 0 ? static_cast<size_t>(world_size) : 1;
  return (numel + w - 1) / w;
}

struct ReduceScatterOptions {
  // Each rank's input is multiplied by 1 / predivide_factor before the sum (in fp32), as
  // DeepSpeed's gradient_predivide_factor: keeps fp16 gradient sums from overflowing. 1 = none.
  double predivide_factor = 1.0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // This rank's index among the ranks of its node, and how many ranks the node runs.
  virtual int local_rank() const = 0;
  virtual int local_world_size() const = 0;
  // "local", "mpi" or "nccl".
  virtual std::string_view backend_name() const = 0;

  // recv[0, numel) = the concatenation of every rank's shard (ShardNumel elements each; the
  // padding past numel is dropped). `send_shard` may be recv + rank() * shard (in place).
  virtual Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                           DType dtype, Event* done) = 0;
  // recv_shard[0, shard) = sum over ranks of send[rank() * shard, ...) / predivide_factor, where
  // shard = ShardNumel(numel, world_size()) and elements past numel count as zero.
  virtual Status ReduceScatter(const Stream& stream, const void* send, void* recv_shard,
                               size_t numel, DType dtype, const ReduceScatterOptions& options,
                               Event* done) = 0;
  // recv[i] = op over ranks of send[i]. send == recv is in place.
  virtual Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel,
                           DType dtype, ReduceOp op, Event* done) = 0;
  // buffer on every rank = buffer on `root`.
  virtual Status Broadcast(const Stream& stream, void* buffer, size_t numel, DType dtype, int root,
                           Event* done) = 0;
  // Completes once every rank's stream has reached its Barrier.
  virtual Status Barrier(const Stream& stream, Event* done) = 0;

  // Sub-communicators (MPI_Comm_split / ncclCommSplit): every rank of this communicator calls
  // Split, in the same order as its collectives; ranks with the same `color` (>= 0) form a new
  // communicator ordered by (`key`, old rank). A rank passing kNoColor takes part but gets
  // nullptr. Blocks the caller until the group exists (bounded by the timeout).
  static constexpr int kNoColor = -1;
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key) = 0;
};

// Forwards every call to a target it does not own (LevelDB's EnvWrapper): a test double
// overrides only what it changes, e.g. failing the third AllReduce.
class CommunicatorWrapper : public Communicator {
 public:
  explicit CommunicatorWrapper(Communicator* target) : target_(target) {}
  Communicator* target() const { return target_; }

  int rank() const override { return target_->rank(); }
  int world_size() const override { return target_->world_size(); }
  int local_rank() const override { return target_->local_rank(); }
  int local_world_size() const override { return target_->local_world_size(); }
  std::string_view backend_name() const override { return target_->backend_name(); }
  Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                   DType dtype, Event* done) override {
    return target_->AllGather(stream, send_shard, recv, numel, dtype, done);
  }
  Status ReduceScatter(const Stream& stream, const void* send, void* recv_shard, size_t numel,
                       DType dtype, const ReduceScatterOptions& options, Event* done) override {
    return target_->ReduceScatter(stream, send, recv_shard, numel, dtype, options, done);
  }
  Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel, DType dtype,
                   ReduceOp op, Event* done) override {
    return target_->AllReduce(stream, send, recv, numel, dtype, op, done);
  }
  Status Broadcast(const Stream& stream, void* buffer, size_t numel, DType dtype, int root,
                   Event* done) override {
    return target_->Broadcast(stream, buffer, numel, dtype, root, done);
  }
  Status Barrier(const Stream& stream, Event* done) override {
    return target_->Barrier(stream, done);
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    return target_->Split(color, key);
  }

 private:
  Communicator* target_;
};

}  // namespace strata
