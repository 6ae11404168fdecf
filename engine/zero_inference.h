// ZeroInference: DeepSpeed's ZeRO-Inference — a model's weights placed for a forward-only run as
// zero_optimization.offload_param says, and streamed to the device module by module through
// stage 3's machinery: the parameter store (engine/zero/store/param_store.h: one flat device array,
// pinned CPU memory, or NVMe shards read into pinned buffers), the forward-only module hooks
// (engine/zero/hooks/zero3_hooks.h) that gather a module's weights before it runs and release them
// after, and the coordinator (engine/zero/hooks/param_coordinator.h) that records the first
// forward's module order and from the next forward on starts the NVMe reads and gathers of later
// layers while earlier ones compute, so the device holds only a few layers at once.
//
// No optimizer state, no gradients: only the compute-dtype weights (bf16/fp16 when the config
// enables them, else fp32), at world 1. Small parameters (numel <=
// stage3_param_persistence_threshold: the norms) stay gathered on the device.
//
// Usage: Create (installs the hooks on `model`), then per forward pass the model's modules run
// (their Forward calls fire the hooks) and FinishForward closes the pass. Destroying it removes
// the hooks; the model's parameters are then unplaced.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/zero/hooks/zero3_hooks.h"
#include "engine/zero/store/param_store.h"
#include "nn/modules/layers/module.h"
#include "offload/device/api/device.h"

namespace strata {

struct ZeroInferenceStats {
  Tier tier = Tier::kDevice;        // where the weights live between uses
  uint64_t store_device_bytes = 0;  // the store's device array (offload_param none)
  uint64_t store_cpu_bytes = 0;     // pinned CPU: the array (cpu) or buffers + kept shards (nvme)
  uint64_t store_nvme_bytes = 0;    // the swap file
  uint64_t nvme_read_bytes = 0;     // read so far
  uint64_t live_bytes = 0, peak_live_bytes = 0;  // gathered weights on the device now / at most
  uint64_t prefetch_hits = 0, prefetch_misses = 0;
  uint64_t weight_bytes = 0;  // every parameter in the compute dtype
};

class ZeroInference {
 public:
  // `model`'s parameters must be unplaced (the model built with allocate_parameters = false);
  // `init` gives each one's fp32 values (they are rounded to `dtype`). `compute` is the stream the
  // model runs on. InvalidArgument naming the key for an offload_param it cannot use (nvme
  // without nvme_path...), OutOfMemory naming the tier.
  static Result<std::unique_ptr<ZeroInference>> Create(nn::Module& model,
                                                       const std::vector<nn::Parameter*>& params,
                                                       const Config& config, Device& device,
                                                       const Stream& compute, DType dtype,
                                                       const ParamInitFn& init);
  ~ZeroInference();

  // The end of one forward pass (after the model's last module); with NVMe, starts the reads of
  // the next pass's first parameters (Note [Next pass read-ahead] in zero_inference.cc).
  Status FinishForward();
  ZeroInferenceStats stats() const;

 private:
  ZeroInference() = default;
  nn::Module* model_ = nullptr;
  DType dtype_ = DType::kFloat32;
  PartitionLayout layout_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<ZeroHooks> hooks_;
  uint64_t weight_bytes_ = 0;
  int64_t prefetch_numel_ = 0;  // stage3_prefetch_bucket_size (Note [Next pass read-ahead])
};

}  // namespace strata
