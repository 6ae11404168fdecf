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

}  // namespace strata::internal
