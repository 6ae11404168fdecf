// Helpers for the host nn kernels: per-ISA clones chosen at run time (GCC target_clones: an
// AVX2+FMA copy for x86-64-v3 CPUs and a baseline copy, picked by the loader through an ifunc),
// a vectorisable exp, and fp32 <-> fp16/bf16 row conversion.
//
// Loops in functions marked STRATA_NN_SIMD are written to auto-vectorise (nn/CMakeLists.txt
// builds these files with -O3 -fopenmp-simd; reductions use `#pragma omp simd reduction`).
#pragma once

#include <cstdint>
#include <cstring>

#include <tbb/parallel_for.h>

#include "core/dtype.h"
#include "core/half.h"

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define STRATA_NN_SIMD __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STRATA_NN_SIMD
#endif

namespace strata::nn::internal {
namespace {  // NOLINT(build/namespaces): one copy per TU, as core/half.h explains.

// oneTBB parallel_for over [begin, end); serial under ThreadSanitizer unless oneTBB itself is
// instrumented (STRATA_TBB_TSAN), as the offload host kernels do, so TSan sees no false races.
template <typename Fn>
void ParallelFor(int64_t begin, int64_t end, const Fn& fn) {
#if defined(__SANITIZE_THREAD__) && !defined(STRATA_TBB_TSAN)
  for (int64_t i = begin; i < end; ++i) fn(i);
#else
  tbb::parallel_for(begin, end, fn);
#endif
}

// exp(x) for fp32 without libm, branch-free so loops over it vectorise: range reduction
// x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial (relative error < 2e-7 on
// [-87, 88]); inputs below -87.3 give exp(-87.3) ~ 1e-38 (not 0), above 88.7 give +Inf.
inline float FastExp(float x) {
  x = x < -87.3f ? -87.3f : x;
  const bool over = x > 88.7f;
  x = x > 88.7f ? 88.7f : x;
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;  // ln2 split in two for an exact reduction
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  uint32_t bits = static_cast<uint32_t>(e < 1 ? 0 : e) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float y = p * scale;
  return over ? __builtin_inff() : y;
}

// dst[i] = float(src[offset + i]) for i < n.
inline void LoadAsFloat(const void* src, DType t, int64_t offset, int64_t n, float* dst) {
  switch (t) {
    case DType::kFloat32:
      std::memcpy(dst, static_cast<const float*>(src) + offset, static_cast<size_t>(n) * 4);
      return;
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
      return;
    }
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(s[i]);
      return;
    }
  }
}

// dst[offset + i] (dtype t) += src[i], in fp32, rounded once.
inline void AccumulateFromFloat(void* dst, DType t, int64_t offset, int64_t n, const float* src) {
  switch (t) {
    case DType::kFloat32: {
      float* d = static_cast<float*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] += src[i];
      return;
    }
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(Bf16ToFloat(d[i]) + src[i]);
      return;
    }
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToFp16(Fp16ToFloat(d[i]) + src[i]);
      return;
    }
  }
}

}  // namespace
}  // namespace strata::nn::internal
