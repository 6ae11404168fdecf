// Random test tensors stored as raw bytes of a DType, with value access in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace strata::testing {

inline double ValueAt(DType t, const std::vector<uint8_t>& buf, size_t i) {
  if (t == DType::kFloat32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, buf.data() + 2 * i, 2);
  return t == DType::kFloat16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
}

inline void SetValue(DType t, std::vector<uint8_t>& buf, size_t i, float v) {
  if (t == DType::kFloat32) {
    std::memcpy(buf.data() + 4 * i, &v, 4);
    return;
  }
  const uint16_t h = t == DType::kFloat16 ? FloatToFp16(v) : FloatToBf16(v);
  std::memcpy(buf.data() + 2 * i, &h, 2);
}

// n values of magnitude 2^[-10, 10) with random sign and mantissa, rounded to `t`; zeros and
// a few values near the type's limits sprinkled in.
inline std::vector<uint8_t> RandomTensor(DType t, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-10, 9);
  std::vector<uint8_t> buf(n * DTypeBytes(t));
  for (size_t i = 0; i < n; ++i) {
    float v = std::ldexp(mant(rng), expo(rng));
    if (rng() % 2) v = -v;
    if (rng() % 97 == 0) v = 0.0f;
    if (rng() % 101 == 0) v = std::ldexp(mant(rng), -20);  // fp16 subnormal range
    SetValue(t, buf, i, v);
  }
  return buf;
}

}  // namespace strata::testing
