// AVX2 squared-norm chunk sums. Compiled with -mavx2 and called only after a run-time CPU check
// (optimizer_kernels.cc); it uses only the intrinsics and functions private to it (no AVX2 code can
// leak into other translation units through duplicate inline functions).
//
// Each chunk is still summed from its first element to its last, in double, one rounding per
// add (the square of a float is exact in double): 8 chunks advance side by side, as two groups of
// 4 whose elements are transposed so that lane j of a 4-double vector holds chunk j. Two groups
// (8 streams 16 KiB apart) rather than more: 16 such streams share one L1 set and ran slower.
#include "offload/device/optim/norm_chunks_avx2.h"

#include <immintrin.h>

namespace strata::internal {
namespace {

// Adds the squares of elements [i, i + 4) of the 4 chunks at b (kNormChunkAvx2 apart), in
// element order, to lane j = chunk j of acc.
inline __m256d AddFour(__m256d acc, const float* b) {
  constexpr size_t kC = kNormChunkAvx2;
  __m128 r0 = _mm_loadu_ps(b), r1 = _mm_loadu_ps(b + kC), r2 = _mm_loadu_ps(b + 2 * kC),
         r3 = _mm_loadu_ps(b + 3 * kC);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // r_t: element i + t of chunks 0..3
  const __m256d d0 = _mm256_cvtps_pd(r0), d1 = _mm256_cvtps_pd(r1), d2 = _mm256_cvtps_pd(r2),
                d3 = _mm256_cvtps_pd(r3);
  acc = _mm256_add_pd(acc, _mm256_mul_pd(d0, d0));
  acc = _mm256_add_pd(acc, _mm256_mul_pd(d1, d1));
  acc = _mm256_add_pd(acc, _mm256_mul_pd(d2, d2));
  return _mm256_add_pd(acc, _mm256_mul_pd(d3, d3));
}

}  // namespace

size_t SquaredNormChunkSumsAvx2(const float* x, size_t full_chunks, double* partials) {
  constexpr size_t kC = kNormChunkAvx2;
  static_assert(kC % 4 == 0, "chunks are whole groups of 4 elements");
  size_t c = 0;
  for (; c + 8 <= full_chunks; c += 8) {
    const float* base = x + c * kC;
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (size_t i = 0; i < kC; i += 4) {
      a0 = AddFour(a0, base + i);
      a1 = AddFour(a1, base + 4 * kC + i);
    }
    _mm256_storeu_pd(partials + c, a0);
    _mm256_storeu_pd(partials + c + 4, a1);
  }
  return c;
}

}  // namespace strata::internal
