// `strata estimate --inference`: what generation (`strata generate`) needs per tier for a model,
// for each weight placement (offload_param none / cpu / nvme): the weights, the KV cache and
// the forward's workspace (models/llama/model/llama_decode.h's plan) on the device, the weights or
// the NVMe buffers in pinned CPU memory, the swap file on NVMe, and the bytes each forward moves.
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

// The words after `strata estimate` with --inference among them; the process exit code.
int RunInferenceEstimate(const std::vector<std::string>& args);

}  // namespace strata::cli
