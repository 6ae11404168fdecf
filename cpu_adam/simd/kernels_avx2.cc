// AVX2 + FMA + F16C kernels (8 floats per vector). This file alone is compiled with
// -mavx2 -mfma -mf16c; it is only called after CpuSupports(SimdIsa::kAvx2).

#include <immintrin.h>

#include "cpu_adam/simd/kernel_impl.h"

namespace strata::internal {
namespace {

struct Avx2Ops {
  using V = __m256;
  static constexpr size_t kWidth = 8;
  static constexpr size_t kUnroll = 2;  // 16 floats = one 64-byte line per fp32 stream
  static constexpr bool kPrefetch = true;
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V LoadBf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void StoreF16(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Round to nearest even on the bit pattern; NaN becomes a quiet NaN (as FloatToBf16).
  // Returns the bf16 bits in the low half of each 32-bit lane.
  static __m256i Bf16Bits(V v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    r = _mm256_srli_epi32(r, 16);
    const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(is_nan));
  }
  // Values are in [0, 0xFFFF], so the unsigned-saturating pack is exact. packus works per 128-bit
  // lane; the permute puts the quadwords back in element order.
  static void StoreBf16(uint16_t* p, V v) {
    const __m256i r = Bf16Bits(v);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static constexpr bool kPairBf16 = true;
  static void StoreBf16Pair(uint16_t* p, V a, V b) {
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(Bf16Bits(a), Bf16Bits(b)), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  static V Sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V MulAdd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V NegMulAdd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V Sign(V a) {
    const V zero = _mm256_setzero_ps();
    const V one = _mm256_set1_ps(1.0f);
    const V pos = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_GT_OQ), one);
    const V neg = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_LT_OQ), one);
    return _mm256_sub_ps(pos, neg);
  }
  static void Prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = MakeKernelTable<Avx2Ops>("avx2");
  return table;
}

}  // namespace strata::internal
