// CudaDevice: the Device interface on a real NVIDIA GPU (cudaMallocAsync pools, cudaMemcpyAsync,
// CUDA events, streams with priorities, the kernel set as real CUDA kernels).
//
// This header is free of CUDA includes. The implementation is compiled only when CMake finds the
// CUDA toolkit (STRATA_WITH_CUDA); callers reach it through CreateDevice() in registry.h.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata {

struct CudaDeviceOptions {
  int ordinal = 0;
  // Cap on device memory this Device hands out (0 = whatever the GPU has). Allocations past it
  // fail with OutOfMemory (tier device) like the GPU's own limit.
  size_t memory_limit_bytes = 0;
};

// Number of usable CUDA devices, or Unavailable with the driver's reason ("no CUDA device:
// cudaGetDeviceCount: ...").
Result<int> CudaDeviceCount();

// Unavailable when there is no (such) GPU.
Result<std::unique_ptr<Device>> CreateCudaDevice(const CudaDeviceOptions& options);

// For the CUDA backends of higher layers (nn/cuda enqueues cuBLAS calls and kernels on the op's
// stream): makes `stream`'s GPU current on the calling thread and returns its cudaStream_t (as
// void*, so this header stays CUDA-free) and the GPU's ordinal. InvalidArgument if `stream` is
// empty or not a CudaDevice stream, FailedPrecondition if it was destroyed. The cudaStream_t is
// valid until DestroyStream; do not destroy or re-prioritise it.
struct CudaNativeStream {
  void* stream = nullptr;
  int ordinal = 0;
};
Result<CudaNativeStream> CudaNativeStreamOf(const Stream& stream);

}  // namespace strata
