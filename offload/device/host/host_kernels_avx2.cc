// AVX2 + F16C bodies of the host kernels. This file is compiled with -mavx2 -mfma -mf16c and is
// only called after a run-time CPU check (host_kernels.cc). To keep AVX2 code from leaking into
// the rest of the program through the linker's choice among duplicate inline functions (ODR),
// it uses only intrinsics and functions private to this file — no standard-library templates.
// No FMA is used for a + alpha * b, so results are bitwise equal to the scalar path.
#include <immintrin.h>

#include <cstdint>

#include "offload/device/host/host_kernels.h"

namespace strata::internal {
namespace {

template <DType T>
struct Tag {};

template <typename F>
void With(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(Tag<DType::kFloat32>{});
      break;
    case DType::kFloat16:
      f(Tag<DType::kFloat16>{});
      break;
    case DType::kBFloat16:
      f(Tag<DType::kBFloat16>{});
      break;
  }
}

inline __m256 Load8(Tag<DType::kFloat32>, const void* p, size_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
inline __m256 Load8(Tag<DType::kFloat16>, const void* p, size_t i) {
  const auto* q = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i);
  return _mm256_cvtph_ps(_mm_loadu_si128(q));
}
inline __m256 Load8(Tag<DType::kBFloat16>, const void* p, size_t i) {
  const auto* q = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q)), 16));
}

inline void Store8(Tag<DType::kFloat32>, void* p, size_t i, __m256 v) {
  _mm256_storeu_ps(static_cast<float*>(p) + i, v);
}
inline void Store8(Tag<DType::kFloat16>, void* p, size_t i, __m256 v) {
  auto* q = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i);
  _mm_storeu_si128(q, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void Store8(Tag<DType::kBFloat16>, void* p, size_t i, __m256 v) {
  // Round to nearest even on the upper 16 bits; NaN is made quiet instead of rounded.
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), packed);
}

void Cast(const KernelLaunch& k, size_t begin, size_t n) {
  With(k.src_dtype, [&](auto s) {
    With(k.dst_dtype, [&](auto d) {
      for (size_t i = begin; i < begin + n; i += 8) Store8(d, k.dst, i, Load8(s, k.src, i));
    });
  });
}

void Scale(const KernelLaunch& k, size_t begin, size_t n) {
  const __m256 alpha = _mm256_set1_ps(k.alpha);
  With(k.dst_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; i += 8) {
      Store8(t, k.dst, i, _mm256_mul_ps(alpha, Load8(t, k.src, i)));
    }
  });
}

void Add(const KernelLaunch& k, size_t begin, size_t n) {
  const __m256 alpha = _mm256_set1_ps(k.alpha);
  With(k.dst_dtype, [&](auto t) {
    With(k.src2_dtype, [&](auto b) {
      for (size_t i = begin; i < begin + n; i += 8) {
        const __m256 scaled = _mm256_mul_ps(alpha, Load8(b, k.src2, i));
        Store8(t, k.dst, i, _mm256_add_ps(Load8(t, k.src, i), scaled));
      }
    });
  });
}

void Fill(const KernelLaunch& k, size_t begin, size_t n) {
  const __m256 v = _mm256_set1_ps(k.value);
  With(k.dst_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; i += 8) Store8(t, k.dst, i, v);
  });
}

bool AnyNonFinite(const KernelLaunch& k, size_t begin, size_t n) {
  // x - x is 0 for finite x and NaN for Inf and NaN.
  __m256 bad = _mm256_setzero_ps();
  With(k.src_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; i += 8) {
      const __m256 v = Load8(t, k.src, i);
      bad =
          _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_UNORD_Q));
    }
  });
  return _mm256_movemask_ps(bad) != 0;
}

double SumSquares(const KernelLaunch& k, size_t begin, size_t n) {
  // The square of a float is exact in double, so fmadd equals multiply-then-add here.
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  With(k.src_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; i += 8) {
      const __m256 v = Load8(t, k.src, i);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      acc0 = _mm256_fmadd_pd(lo, lo, acc0);
      acc1 = _mm256_fmadd_pd(hi, hi, acc1);
    }
  });
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, acc0);
  _mm256_store_pd(lanes + 4, acc1);
  double sum = 0;
  for (double x : lanes) sum += x;
  return sum;
}

}  // namespace

const HostKernelPath kAvx2KernelPath = {&Cast, &Scale, &Add, &Fill, &AnyNonFinite, &SumSquares};

}  // namespace strata::internal
