// Stage 3's compute-dtype shards written from the fp32 master: after initialisation and after a
// checkpoint load (SyncParametersFromMaster), this rank's flat partition of master weights is
// rounded to the compute dtype (round to nearest even, as the optimizer's write-back and
// nn::UploadParameter round) and stored where the shards live.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/zero/store/param_store.h"
#include "offload/device/api/stream.h"

namespace strata {

// The store's flat range [flat_begin, flat_begin + numel) = master[0, numel) as `dtype`.
// `master` is host-addressable; the store's Write puts it wherever the shards live.
Status WriteShardsFromMaster(const float* master, size_t flat_begin, size_t numel, DType dtype,
                             ParamStore& store, const Stream& stream);

}  // namespace strata
