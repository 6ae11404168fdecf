#include "engine/comm/collective.h"

#include <cmath>

#include "offload/device/api/device.h"

namespace strata {

std::string_view ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

std::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kSplit:
      return "split";
  }
  return "?";
}

namespace internal {

std::string CollectiveDesc::ToString() const {
  std::string s = std::string(CollectiveKindName(kind)) + " #" + std::to_string(seq);
  if (kind == CollectiveKind::kBarrier || kind == CollectiveKind::kSplit) return s;
  s += " (" + std::string(DTypeName(dtype)) + ", " + std::to_string(numel) + " elements";
  if (kind == CollectiveKind::kAllReduce) s += ", " + std::string(ReduceOpName(op));
  if (kind == CollectiveKind::kBroadcast) s += ", root " + std::to_string(root);
  return s + ")";
}

bool CollectiveDesc::SameShape(const CollectiveDesc& o) const {
  if (kind != o.kind) return false;
  if (kind == CollectiveKind::kBarrier || kind == CollectiveKind::kSplit) return true;
  return dtype == o.dtype && numel == o.numel &&
         (kind != CollectiveKind::kAllReduce || op == o.op) &&
         (kind != CollectiveKind::kBroadcast || root == o.root);
}

size_t SendBytes(const CollectiveDesc& d, int world) {
  const size_t es = DTypeBytes(d.dtype);
  switch (d.kind) {
    case CollectiveKind::kAllGather:
      return ShardNumel(d.numel, world) * es;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
      return d.numel * es;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSplit:
      return 0;
  }
  return 0;
}

size_t RecvBytes(const CollectiveDesc& d, int world) {
  const size_t es = DTypeBytes(d.dtype);
  switch (d.kind) {
    case CollectiveKind::kReduceScatter:
      return ShardNumel(d.numel, world) * es;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
      return d.numel * es;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSplit:
      return 0;
  }
  return 0;
}

Status ValidateCollective(const char* backend, const CollectiveDesc& d, const CollectiveBuffers& b,
                          int rank, int world, const Stream& stream, const Event* done) {
  const std::string where =
      std::string("comm ") + backend + ": " + std::string(CollectiveKindName(d.kind)) + ": ";
  if (!stream.valid()) return InvalidArgumentError(where + "stream is not a valid Stream");
  if (done != nullptr && done->valid() && done->device() != stream.device()) {
    return InvalidArgumentError(where + "event `done` belongs to another device than the stream");
  }
  if (done != nullptr && !done->valid()) {
    return InvalidArgumentError(where + "event `done` is not a valid Event (create it first)");
  }
  if (d.kind == CollectiveKind::kBarrier || d.kind == CollectiveKind::kSplit || d.numel == 0) {
    return Status::Ok();
  }
  const bool needs_send = d.kind != CollectiveKind::kBroadcast;
  if ((needs_send && b.send == nullptr) || b.recv == nullptr) {
    return InvalidArgumentError(where + "null buffer for " + std::to_string(d.numel) + " elements");
  }
  if (d.kind == CollectiveKind::kBroadcast && (d.root < 0 || d.root >= world)) {
    return InvalidArgumentError(where + "root " + std::to_string(d.root) + " is not a rank (0-" +
                                std::to_string(world - 1) + ")");
  }
  if (!(d.predivide_factor > 0) || !std::isfinite(d.predivide_factor)) {
    return InvalidArgumentError(where + "predivide_factor " + std::to_string(d.predivide_factor) +
                                " must be finite and > 0");
  }
  if (!needs_send || b.send == b.recv) return Status::Ok();
  const auto* s = static_cast<const char*>(b.send);
  const auto* r = static_cast<const char*>(b.recv);
  const size_t sn = SendBytes(d, world), rn = RecvBytes(d, world);
  const bool overlap = s < r + rn && r < s + sn;
  if (!overlap) return Status::Ok();
  if (d.kind == CollectiveKind::kAllGather && s == r + static_cast<size_t>(rank) * sn) {
    return Status::Ok();  // in place: this rank's shard of recv
  }
  if (d.kind == CollectiveKind::kReduceScatter && r == s + static_cast<size_t>(rank) * rn) {
    return Status::Ok();  // in place: this rank's shard of send (staged by the backend)
  }
  return InvalidArgumentError(where + "send and recv overlap without being in place");
}

}  // namespace internal
}  // namespace strata
