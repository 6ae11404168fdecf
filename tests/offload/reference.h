// Test oracles for the device layer: fp16/bf16 rounding written independently of
// core/half.h (frexp/ldexp + nearbyint, i.e. the FPU's round-half-even in double),
// and ulp/tolerance helpers. Plain and slow on purpose.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace strata::testing {

inline double RefDecodeFp16(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(m, -24);
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return sign ? -v : v;
}

inline double RefDecodeBf16(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rounds `v` (any double) to a format with `mant_bits` stored mantissa bits, exponent range
// [emin, emax] for normals, subnormals below; returns the rounded value as a double (+-Inf on
// overflow, NaN for NaN). Round half to even.
inline double RefRound(double v, int mant_bits, int emin, int emax) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  const double a = std::fabs(v);
  int ex;
  std::frexp(a, &ex);
  int e = ex - 1;          // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;  // subnormal: fixed quantum 2^(emin - mant_bits)
  const double q = std::nearbyint(std::ldexp(a, mant_bits - e));
  double r = std::ldexp(q, e - mant_bits);
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), emax);
  if (r > max_finite) r = INFINITY;
  return v < 0 ? -r : r;
}

inline double RefRoundTo(DType t, double v) {
  switch (t) {
    case DType::kFloat32:
      return RefRound(v, 23, -126, 127);
    case DType::kFloat16:
      return RefRound(v, 10, -14, 15);
    case DType::kBFloat16:
      return RefRound(v, 7, -126, 127);
  }
  return v;
}

// Unit roundoff (half an ulp at 1.0) of a type.
inline double UnitRoundoff(DType t) {
  return t == DType::kFloat32   ? std::ldexp(1.0, -24)
         : t == DType::kFloat16 ? std::ldexp(1.0, -11)
                            : std::ldexp(1.0, -8);
}
// Half the smallest subnormal spacing: the absolute error floor of rounding to `t`.
inline double AbsoluteFloor(DType t) {
  return t == DType::kFloat32   ? std::ldexp(1.0, -150)
         : t == DType::kFloat16 ? std::ldexp(1.0, -25)
                            : std::ldexp(1.0, -134);
}

}  // namespace strata::testing
