// ParamCopyTarget: where a host optimizer step writes the updated compute-dtype parameters, one
// sub-group at a time — issue #36, "the updated compute-dtype parameters go back to the
// parameter store from those chunks (no partition-sized staging)".
//
//   FlatParamCopy   a partition-sized host array (the stage-3 shards themselves with
//                   offload_param cpu, or the engine's staging): sub-group g writes its range in
//                   place; nothing to hand on.
//   StoreParamCopy  offload_param nvme: one buffer of the largest sub-group (swap chunk) that each
//                   sub-group's update writes into and that Commit hands to ParamStore::Write for
//                   the sub-group's flat range (copied into the store's swap buffers there), so the
//                   pinned memory is bounded by the chunk, not the partition.
//
// Protocol, per sub-group: Begin(g) gives the destination of its numel elements (copy dtype),
// the update writes them, Commit(g) hands them on; the destination is not valid after Commit
// (the next Begin may return the same memory). A sub-group begun and not committed (its update
// failed) is simply begun again or abandoned: nothing was handed on.
//
// Thread safety: one thread at a time (the step's); Commit on StoreParamCopy must run where the
// store may be driven (the engine's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/zero/store/param_store.h"
#include "offload/device/api/stream.h"
#include "offload/pinned_pool.h"

namespace strata {

class ParamCopyTarget {
 public:
  virtual ~ParamCopyTarget() = default;
  DType dtype() const { return dtype_; }
  // The destination of sub-group g's g.flat_end - g.flat_begin elements (host-addressable).
  virtual Result<uint8_t*> Begin(const SubGroup& g) = 0;
  // Sub-group g's values (written since Begin) are final: hand them on.
  virtual Status Commit(const SubGroup& g) = 0;

 protected:
  explicit ParamCopyTarget(DType dtype) : dtype_(dtype) {}
  DType dtype_;
};

// A partition-sized host array (not owned), indexed by flat element.
class FlatParamCopy final : public ParamCopyTarget {
 public:
  FlatParamCopy(void* flat, DType dtype) : ParamCopyTarget(dtype), flat_(flat) {}
  Result<uint8_t*> Begin(const SubGroup& g) override {
    return static_cast<uint8_t*>(flat_) + g.flat_begin * DTypeBytes(dtype_);
  }
  Status Commit(const SubGroup&) override { return Status::Ok(); }

 private:
  void* flat_;
};

// offload_param nvme: one pinned (or plain, pin false) buffer of max_numel elements, charged to
// `budget`; Commit writes the sub-group's range into `store` (its Write copies the bytes: the
// buffer is free again when Commit returns). InvalidArgument for a sub-group larger than
// max_numel.
class StoreParamCopy final : public ParamCopyTarget {
 public:
  static Result<std::unique_ptr<StoreParamCopy>> Create(ParamStore* store, const Stream& stream,
                                                        size_t max_numel, DType dtype, bool pin,
                                                        Device* device, TierBudget* budget);
  Result<uint8_t*> Begin(const SubGroup& g) override;
  Status Commit(const SubGroup& g) override;
  uint64_t cpu_bytes() const { return pool_->buffer_bytes(); }

 private:
  StoreParamCopy(ParamStore* store, const Stream& stream, size_t max_numel, DType dtype)
      : ParamCopyTarget(dtype), store_(store), stream_(stream), max_numel_(max_numel) {}
  ParamStore* store_;
  Stream stream_;
  size_t max_numel_;
  std::unique_ptr<PinnedPool> pool_;
  PinnedBuffer buffer_;
};

}  // namespace strata
