// Scalar fp32 <-> fp16 / bf16 conversions, round-to-nearest-even, for host code.
//
// These are the oracle the vectorised host kernels fall back to for tails and on CPUs without
// F16C, and what tests compare against. Semantics (same as CUDA's __float2half_rn /
// __float2bfloat16_rn and x86 F16C):
//   - finite values round to nearest, ties to even; values past the largest finite value
//     (65504 for fp16, ~3.39e38 for bf16) after rounding become +-Inf;
//   - +-Inf stays +-Inf; NaN stays NaN (made quiet, sign and top payload bits kept);
//   - fp16 subnormals are produced and read exactly (no flush to zero).
// Requires the default floating-point environment (round to nearest, no FTZ/DAZ).
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

inline float Fp16ToFloat(uint16_t h) {
  // Technique from the FP16 library (M. Dukhan): rebias the exponent with one multiply, and
  // build subnormals by subtracting a magic number.
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = std::bit_cast<float>((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denorm_cutoff = 1u << 27;
  const uint32_t bits = sign | (two_w < denorm_cutoff ? std::bit_cast<uint32_t>(denormalized)
                                                      : std::bit_cast<uint32_t>(normalized));
  return std::bit_cast<float>(bits);
}

inline uint16_t FloatToFp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
  }
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (and Inf)
  if (x < 0x38800000u) {
    // Result is an fp16 subnormal or zero: adding 0.5 aligns the value so that the FPU's own
    // round-to-nearest-even produces the 10-bit subnormal mantissa in the low bits.
    const float magic = std::bit_cast<float>(126u << 23);  // 0.5f
    const float r = std::bit_cast<float>(x) + magic;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - (126u << 23)));
  }
  const uint32_t mant_odd = (x >> 13) & 1u;
  x += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu + mant_odd;
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace strata
