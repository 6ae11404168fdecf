// PinnedStash: slots of page-locked host memory (offload/pinned_pool.h) that hold checkpointed
// activations off the device — DeepSpeed's cpu_checkpointing. A decoder layer's input is copied
// D2H after its forward and back H2D before its recompute in backward, on the model's stream.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/status.h"
#include "nn/tensor/tensor.h"
#include "offload/pinned_pool.h"

namespace strata::nn {

class PinnedStash {
 public:
  // `slots` buffers of `slot_bytes`. OutOfMemory (cpu) if they cannot be allocated.
  static Result<std::unique_ptr<PinnedStash>> Create(Device* device, size_t slot_bytes,
                                                     size_t slots);
  ~PinnedStash();

  // Enqueues a copy of `x` (device memory) into slot `i`.
  Status Save(const Stream& stream, size_t i, const Tensor& x);
  // Enqueues a copy of slot `i` into `dst` (device memory), of dst.size_bytes().
  Status Restore(const Stream& stream, size_t i, const Tensor& dst);
  size_t slot_bytes() const { return slot_bytes_; }
  size_t slots() const { return leases_.size(); }
  bool locked() const { return pool_->locked(); }

 private:
  PinnedStash() = default;
  size_t slot_bytes_ = 0;
  std::unique_ptr<PinnedPool> pool_;
  std::vector<PinnedBuffer> leases_;
};

}  // namespace strata::nn
