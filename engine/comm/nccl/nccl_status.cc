#include "engine/comm/nccl/nccl_status.h"

#include <chrono>
#include <thread>

namespace strata::internal {

Status NcclStatus(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
  std::string msg = what + ": " + ncclGetErrorString(r);
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(msg);
    case ncclSystemError:
    case ncclRemoteError:
      return AbortedError(msg + " (a peer failed or the network broke)");
    case ncclUnhandledCudaError:
      return InternalError(msg);
    default:
      return AbortedError(msg);
  }
}
Status CudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  const std::string msg = what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation)
    return OutOfMemoryError("out of memory on tier device: " + msg);
  return InternalError(msg);
}

Status WaitNccl(ncclComm_t comm, double timeout_s, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ncclResult_t state = ncclInProgress;
  while (true) {
    STRATA_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &state), what));
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (std::chrono::steady_clock::now() > deadline) {
      return AbortedError(what + ": not every rank joined within " + std::to_string(timeout_s) +
                          " s (strata.comm_timeout_s)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace strata::internal
