// AVX-512F kernels (16 floats per vector). This file alone is compiled with -mavx512f (and, via
// kernels_avx512_bf16.cc, a second time with -mavx512bf16 and STRATA_KERNELS_AVX512_BF16 = 1,
// which swaps the bf16 narrowing for the native vcvtneps2bf16). Only called after
// CpuSupports(SimdIsa::kAvx512) (and CpuHasAvx512Bf16() for the second variant).
//
// Not executed on the development machine (Zen 3, no AVX-512): compiled and linked in every
// build, exercised by the same conformance tests on a CPU that has it.

#include <immintrin.h>

#include "cpu_adam/simd/kernel_impl.h"

#ifndef STRATA_KERNELS_AVX512_BF16
#define STRATA_KERNELS_AVX512_BF16 0
#endif

namespace strata::internal {
namespace {

struct Avx512Ops {
  using V = __m512;
  static constexpr size_t kWidth = 16;
  static constexpr size_t kUnroll = 1;  // 16 floats = one 64-byte line per fp32 stream
  static constexpr bool kPrefetch = true;
  static constexpr bool kPairBf16 = false;
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadBf16(const uint16_t* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void StoreF16(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void StoreBf16(uint16_t* p, V v) {
#if STRATA_KERNELS_AVX512_BF16
    // Native round-to-nearest-even. Unlike the integer path it flushes subnormal results to
    // zero, which only matters for |p| < 1.2e-38.
    const __m256bh b = _mm512_cvtneps_pbh(v);
    std::memcpy(p, &b, sizeof(b));
#else
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    r = _mm512_srli_epi32(r, 16);
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
#endif
  }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm512_div_ps(a, b); }
  static V Sqrt(V a) { return _mm512_sqrt_ps(a); }
  static V MulAdd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V NegMulAdd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V Sign(V a) {
    const V zero = _mm512_setzero_ps();
    const V one = _mm512_set1_ps(1.0f);
    const V pos = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), one);
    const V neg = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ), one);
    return _mm512_sub_ps(pos, neg);
  }
  static void Prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
};

}  // namespace

#if STRATA_KERNELS_AVX512_BF16
const KernelTable& Avx512Bf16Kernels() {
  static const KernelTable table = MakeKernelTable<Avx512Ops>("avx512+bf16");
  return table;
}
#else
const KernelTable& Avx512Kernels() {
  static const KernelTable table = MakeKernelTable<Avx512Ops>("avx512");
  return table;
}
#endif

}  // namespace strata::internal
