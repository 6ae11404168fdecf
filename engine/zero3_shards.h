// Stage 3's compute-dtype shards written from the fp32 master: after initialisation and after a
// checkpoint load (SyncParametersFromMaster), this rank's flat partition of master weights is
// rounded to the compute dtype (round to nearest even, as the optimizer's write-back and
// nn::UploadParameter round) and stored where the shards live.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "core/status.h"
#include "offload/device/stream.h"

namespace strata {

// shards[0, numel) = master[0, numel) as `dtype`. `master` is host-addressable; `shards` is
// host memory if shards_on_host, else device memory of `stream`'s device (copied H2D, then
// synchronized).
Status WriteShardsFromMaster(const float* master, size_t numel, DType dtype, void* shards,
                             bool shards_on_host, const Stream& stream);

}  // namespace strata
