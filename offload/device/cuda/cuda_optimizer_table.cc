// The CUDA backend of the device optimizer kernels (optimizer_kernels.h): enqueues the kernels of
// cuda_optimizer_kernels.cu on the stream's cudaStream_t.
#include <cuda_runtime.h>

#include <string>

#include "offload/device/cuda/cuda_device.h"
#include "offload/device/cuda/cuda_optimizer_kernels.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata::internal {
namespace {

Status LaunchStatus(int err, const char* what) {
  const auto e = static_cast<cudaError_t>(err);
  if (e == cudaSuccess) return Status::Ok();
  return InternalError(std::string(what) + ": kernel launch failed: " + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + ")");
}

Status Step(const Stream& stream, const OptimizerStepLaunch& /*launch*/,
            const OptimizerKernelArgs& args) {
  STRATA_ASSIGN_OR_RETURN(CudaNativeStream s, CudaNativeStreamOf(stream));
  return LaunchStatus(LaunchCudaOptimizerStep(args, s.stream), "cuda optimizer step");
}

Status SquaredNormPartials(const Stream& stream, double* partials, const float* src, size_t numel) {
  STRATA_ASSIGN_OR_RETURN(CudaNativeStream s, CudaNativeStreamOf(stream));
  return LaunchStatus(LaunchCudaSquaredNormPartials(partials, src, numel, s.stream),
                      "cuda squared norm");
}

}  // namespace

const OptimizerKernelTable& CudaOptimizerKernels() {
  static const OptimizerKernelTable table{"cuda", &Step, &SquaredNormPartials};
  return table;
}

}  // namespace strata::internal
