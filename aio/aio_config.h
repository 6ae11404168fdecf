// Reading and writing the `aio` config section (DeepSpeed's keys and defaults) into AioOptions.
#pragma once

#include <nlohmann/json.hpp>

#include "aio/aio_options.h"
#include "core/status.h"

namespace strata {

// Applies the top-level `aio` section (block_size, queue_depth, intra_op_parallelism or its old
// name thread_count - one of them, not both -, single_submit, overlap_events, use_gds) onto
// `options`. Unknown keys are errors naming "aio.<key>". use_gds = true is Unavailable here
// (GPUDirect Storage needs CUDA + cuFile).
Status ApplyAioSection(const nlohmann::json& aio, AioOptions* options);

// The `aio` section for `options`, ready to paste into a config.
nlohmann::json AioSectionJson(const AioOptions& options);

}  // namespace strata
