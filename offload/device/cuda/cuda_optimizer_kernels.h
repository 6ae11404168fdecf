// Launchers for the CUDA optimizer kernels (cuda_optimizer_kernels.cu). Free of CUDA includes so
// the C++ table (cuda_optimizer_table.cc) and the .cu share it; the stream is a cudaStream_t
// passed as void*.
#pragma once

#include "offload/device/optim/optimizer_kernel_args.h"

namespace strata::internal {

// Enqueue (already validated) work on `cuda_stream`; return the cudaError_t of the launch
// (0 = cudaSuccess). Execution errors surface at the next synchronisation.
int LaunchCudaOptimizerStep(const OptimizerKernelArgs& args, void* cuda_stream);
int LaunchCudaSquaredNormPartials(double* partials, const float* src, size_t numel,
                                  void* cuda_stream);

}  // namespace strata::internal
