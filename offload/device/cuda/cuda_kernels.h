// Launchers for the CUDA versions of the device kernel set (cuda_kernels.cu). Free of CUDA
// includes so cuda_device.cc and the .cu share it; the stream is a cudaStream_t passed as void*.
#pragma once

#include "offload/device/api/kernel_launch.h"

namespace strata::internal {

// Enqueues `launch` (already validated) on `cuda_stream`; returns the cudaError_t of the launch
// (0 = cudaSuccess). Execution errors surface at the next synchronisation, as with any kernel.
int LaunchCudaKernel(const KernelLaunch& launch, void* cuda_stream);

}  // namespace strata::internal
