// The scalar fp16/bf16 conversions, exhaustively over every 16-bit pattern and every rounding
// midpoint. (The SIMD conversions are checked against these bit for bit in conformance_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu_adam/simd/dtype.h"

namespace strata {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CpuAdamDTypeTest, NamesRoundTrip) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    EXPECT_EQ(ParseDType(DTypeName(d)), d);
  }
  EXPECT_EQ(ParseDType("bfloat16"), DType::kBFloat16);
  EXPECT_FALSE(ParseDType("fp8").has_value());
  EXPECT_EQ(DTypeBytes(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeBytes(DType::kBFloat16), 2u);
}

TEST(CpuAdamDTypeTest, HalfKnownValues) {
  EXPECT_EQ(Fp16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(Fp16ToFloat(0xFC00)) && Fp16ToFloat(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7E00)));
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);  // halfway to 65536 rounds to even: infinity
  EXPECT_EQ(FloatToFp16(1e9f), 0x7C00);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(FloatToFp16(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp -> even 2
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);
}

TEST(CpuAdamDTypeTest, BFloat16KnownValues) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7FFFFF)), 0x7F80);    // max float rounds to inf
  const uint16_t nan = FloatToBf16(FromBits(0x7F800001));  // signalling NaN, tiny payload
  EXPECT_TRUE(std::isnan(Bf16ToFloat(nan))) << std::hex << nan;
}

// For every finite 16-bit value x: widening then narrowing returns x, and the float midpoint
// between x and its successor rounds to whichever of the two has an even mantissa, while one
// float ulp either side of the midpoint rounds to the nearer one.
template <typename ToFloat, typename FromFloat>
void CheckExhaustive(ToFloat to_float, FromFloat from_float, uint16_t inf_bits) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<uint16_t>(h);
    if ((x & 0x7FFF) > inf_bits) {
      ASSERT_TRUE(std::isnan(to_float(x))) << std::hex << h;
      ASSERT_TRUE(std::isnan(to_float(from_float(to_float(x))))) << std::hex << h;
      continue;
    }
    const float f = to_float(x);
    ASSERT_EQ(from_float(f), x) << std::hex << h;
    const auto next = static_cast<uint16_t>(x + 1);
    // The top of the range (successor is infinity) is covered by the known-value tests.
    if ((next & 0x7FFF) >= inf_bits) continue;
    const float fn = to_float(next);
    const float mid = static_cast<float>((static_cast<double>(f) + fn) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(f) + fn) / 2) << "not exact";
    ASSERT_EQ(from_float(mid), (x & 1) ? next : x) << std::hex << h;
    if (std::fabs(mid) > 0) {
      const float below = std::nextafter(mid, f), above = std::nextafter(mid, fn);
      ASSERT_EQ(from_float(below), x) << std::hex << h;
      ASSERT_EQ(from_float(above), next) << std::hex << h;
    }
  }
}

TEST(CpuAdamDTypeTest, HalfExhaustiveRoundTripAndRounding) {
  CheckExhaustive(Fp16ToFloat, FloatToFp16, 0x7C00);
}

TEST(CpuAdamDTypeTest, BFloat16ExhaustiveRoundTripAndRounding) {
  CheckExhaustive(Bf16ToFloat, FloatToBf16, 0x7F80);
}

}  // namespace
}  // namespace strata
