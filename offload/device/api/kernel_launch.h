// KernelLaunch: the description of one device kernel, as passed from the typed launch functions
// (offload/device/api/kernels.h) to a Device's LaunchKernel.
//
// A plain struct (no CUDA types, no allocation) so that HostDevice can queue it by value and the
// CUDA backend can hand it to a .cu file. Field meanings per op are documented in kernels.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

enum class KernelOp : uint8_t {
  kCast,            // dst[i] = convert(src[i])
  kScale,           // dst[i] = alpha * src[i]
  kAdd,             // dst[i] = src[i] + alpha * src2[i]
  kFill,            // dst[i] = value
  kCheckFinite,     // if any src[i] is Inf or NaN: *flag = 1
  kL2NormPartials,  // partials[p] = sum of src[i]^2 over chunk p
};

const char* KernelOpName(KernelOp op);

struct KernelLaunch {
  KernelOp op = KernelOp::kFill;
  size_t numel = 0;
  void* dst = nullptr;
  DType dst_dtype = DType::kFloat32;
  const void* src = nullptr;
  DType src_dtype = DType::kFloat32;
  const void* src2 = nullptr;
  DType src2_dtype = DType::kFloat32;
  float alpha = 1.0f;         // kScale, kAdd
  float value = 0.0f;         // kFill
  uint32_t* flag = nullptr;   // kCheckFinite: device memory
  float* partials = nullptr;  // kL2NormPartials: device memory, num_partials floats
  size_t num_partials = 0;    // kL2NormPartials
};

// Chunk length for kL2NormPartials: ceil(numel / num_partials); chunk p covers
// [p * chunk, min((p + 1) * chunk, numel)), possibly empty (then partials[p] = 0).
constexpr size_t L2ChunkNumel(size_t numel, size_t num_partials) {
  return num_partials == 0 ? 0 : (numel + num_partials - 1) / num_partials;
}

}  // namespace strata
