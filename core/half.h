// Scalar fp32 <-> fp16 / bf16 conversions, round to nearest even, integer-only (independent of
// the floating-point environment: no FTZ/DAZ or rounding-mode surprises). Semantics, the same as
// x86 F16C and CUDA's __float2half_rn / __float2bfloat16_rn:
//   - finite values round to nearest, ties to even; past the largest finite value they become
//     +-Inf; +-Inf stays +-Inf; NaN stays a (quiet) NaN with its sign and top payload bits;
//   - fp16 subnormals are produced and read exactly (no flush to zero).
//
// Note [Internal linkage on purpose]: SIMD kernels are compiled per ISA (-mavx2, -mavx512f) and
// use these for their tails. With ordinary inline functions the linker could keep an
// AVX-compiled copy for everyone, and the scalar path would execute AVX on a CPU without it.
// The anonymous namespace gives every translation unit its own copy, built with its own flags.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata {
namespace {  // NOLINT(build/namespaces): see Note [Internal linkage on purpose].

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Bf16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);  // +-0
  // Subnormal: value = mant * 2^-24, exact in fp32.
  int e = 113;  // exponent of 2^-14 biased for fp32 (127 - 14)
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsToFloat(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3FFu) << 13));
}

inline uint16_t FloatToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24 rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 (value = mant * 2^(exp-150))
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t r = abs - 0x38000000u;  // exponent 127 -> 15 bias
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace
}  // namespace strata
