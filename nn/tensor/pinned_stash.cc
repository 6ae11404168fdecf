#include "nn/tensor/pinned_stash.h"

#include <string>

namespace strata::nn {

Result<std::unique_ptr<PinnedStash>> PinnedStash::Create(Device* device, size_t slot_bytes,
                                                         size_t slots) {
  std::unique_ptr<PinnedStash> s(new PinnedStash());
  PinnedPoolOptions o;
  o.buffer_bytes = slot_bytes;
  o.buffer_count = slots;
  o.device = device;
  o.name = "cpu checkpointing activations";
  STRATA_ASSIGN_OR_RETURN(s->pool_, PinnedPool::Create(o));
  s->slot_bytes_ = slot_bytes;
  for (size_t i = 0; i < slots; ++i) s->leases_.push_back(s->pool_->Acquire());
  return s;
}

PinnedStash::~PinnedStash() { leases_.clear(); }

Status PinnedStash::Save(const Stream& stream, size_t i, const Tensor& x) {
  if (i >= leases_.size() || x.size_bytes() > slot_bytes_) {
    return InvalidArgumentError("cpu checkpoint save: slot " + std::to_string(i) + " of " +
                                std::to_string(leases_.size()) + ", " +
                                std::to_string(x.size_bytes()) + " bytes into slots of " +
                                std::to_string(slot_bytes_));
  }
  return stream.CopyAsync(leases_[i].data(), x.data, x.size_bytes(), CopyKind::kDeviceToHost);
}

Status PinnedStash::Restore(const Stream& stream, size_t i, const Tensor& dst) {
  if (i >= leases_.size() || dst.size_bytes() > slot_bytes_) {
    return InvalidArgumentError("cpu checkpoint restore: slot " + std::to_string(i) + " of " +
                                std::to_string(leases_.size()));
  }
  return stream.CopyAsync(dst.data, leases_[i].data(), dst.size_bytes(), CopyKind::kHostToDevice);
}

}  // namespace strata::nn
