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

// Applies Strata's own aio keys from the `strata` section: aio_engine (io_uring | libaio | auto),
// aio_allow_buffered (bool), aio_sqpoll (bool). Other keys of that section belong to other layers
// and are checked by the engine's config.
Status ApplyStrataAioKeys(const nlohmann::json& strata, AioOptions* options);

// The `aio` section for `options`, ready to paste into a config.
nlohmann::json AioSectionJson(const AioOptions& options);

}  // namespace strata
