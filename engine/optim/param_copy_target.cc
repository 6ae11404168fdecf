#include "engine/optim/param_copy_target.h"

#include <algorithm>
#include <string>

namespace strata {

Result<std::unique_ptr<StoreParamCopy>> StoreParamCopy::Create(ParamStore* store,
                                                               const Stream& stream,
                                                               size_t max_numel, DType dtype,
                                                               bool pin, Device* device,
                                                               TierBudget* budget) {
  if (store == nullptr) return InvalidArgumentError("parameter write-back: no parameter store");
  std::unique_ptr<StoreParamCopy> t(new StoreParamCopy(store, stream, max_numel, dtype));
  PinnedPoolOptions po;
  po.buffer_bytes = std::max<size_t>(max_numel * DTypeBytes(dtype), 64);
  po.buffer_count = 1;
  po.lock = pin;
  po.device = device;
  po.budget = budget;
  po.name = "updated parameter write-back buffer (largest sub-group)";
  STRATA_ASSIGN_OR_RETURN(t->pool_, PinnedPool::Create(po));
  t->buffer_ = t->pool_->Acquire();
  return t;
}

Result<uint8_t*> StoreParamCopy::Begin(const SubGroup& g) {
  const size_t n = g.flat_end - g.flat_begin;
  if (n > max_numel_) {
    return InvalidArgumentError("parameter write-back: sub-group [" + std::to_string(g.flat_begin) +
                                ", " + std::to_string(g.flat_end) + ") has " + std::to_string(n) +
                                " elements, more than the buffer's " + std::to_string(max_numel_));
  }
  return static_cast<uint8_t*>(buffer_.data());
}

Status StoreParamCopy::Commit(const SubGroup& g) {
  const size_t n = g.flat_end - g.flat_begin;
  if (n == 0) return Status::Ok();
  return store_->Write(g.flat_begin, buffer_.data(), n, stream_)
      .WithContext("writing back the parameters of [" + std::to_string(g.flat_begin) + ", " +
                   std::to_string(g.flat_end) + ")");
}

}  // namespace strata
