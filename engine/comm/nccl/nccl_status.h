// The one seam where NCCL (and the CUDA calls around it) become Status, and the wait for a
// non-blocking NCCL communicator. Internal to the nccl backend.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/status.h"

namespace strata::internal {

Status NcclStatus(ncclResult_t r, const std::string& what);
Status CudaStatus(cudaError_t e, const std::string& what);
// Waits for a non-blocking communicator's pending call; Aborted past the deadline.
Status WaitNccl(ncclComm_t comm, double timeout_s, const std::string& what);

}  // namespace strata::internal
