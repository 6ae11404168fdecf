// Scalar fp16/bf16 conversions (core/half.h) against the independent reference.
#include "core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "tests/offload/reference.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::RefDecodeBf16;
using testing::RefDecodeFp16;
using testing::RefRoundTo;

void ExpectSameValue(double want, float got, const char* what, uint32_t input_bits) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << " input 0x" << std::hex << input_bits;
  } else {
    EXPECT_EQ(want, static_cast<double>(got)) << what << " input 0x" << std::hex << input_bits;
    EXPECT_EQ(std::signbit(want), std::signbit(got))
        << what << " sign, 0x" << std::hex << input_bits;
  }
}

TEST(HalfTest, DecodesEveryFp16AndBf16ValueExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ExpectSameValue(RefDecodeFp16(static_cast<uint16_t>(h)), Fp16ToFloat(static_cast<uint16_t>(h)),
                    "fp16->f32", h);
    ExpectSameValue(RefDecodeBf16(static_cast<uint16_t>(h)), Bf16ToFloat(static_cast<uint16_t>(h)),
                    "bf16->f32", h);
  }
}

TEST(HalfTest, EncodesRoundTripsAndTiesToEven) {
  // Every fp16 value round-trips; every midpoint between neighbours rounds to the even one.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const uint16_t x = static_cast<uint16_t>(h | sign);
      EXPECT_EQ(x, FloatToFp16(Fp16ToFloat(x)));
      const double lo = RefDecodeFp16(x), hi = RefDecodeFp16(static_cast<uint16_t>(x + 1));
      const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
      const uint16_t want = (x & 1) ? static_cast<uint16_t>(x + 1) : x;
      EXPECT_EQ(want, FloatToFp16(mid)) << "midpoint above 0x" << std::hex << x;
    }
  }
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint16_t x = static_cast<uint16_t>(b);
    EXPECT_EQ(x, FloatToBf16(Bf16ToFloat(x)));
    const float mid = std::bit_cast<float>((static_cast<uint32_t>(x) << 16) | 0x8000u);
    const uint16_t want = (x & 1) ? static_cast<uint16_t>(x + 1) : x;
    EXPECT_EQ(want, FloatToBf16(mid)) << "midpoint above 0x" << std::hex << x;
  }
}

TEST(HalfTest, EncodesRandomFloatsLikeTheReference) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float f = std::bit_cast<float>(bits);
    ExpectSameValue(RefRoundTo(DType::kFloat16, f), Fp16ToFloat(FloatToFp16(f)), "f32->fp16", bits);
    ExpectSameValue(RefRoundTo(DType::kBFloat16, f), Bf16ToFloat(FloatToBf16(f)), "f32->bf16",
                    bits);
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(HalfTest, HandlesSpecialValues) {
  EXPECT_EQ(0x7C00, FloatToFp16(INFINITY));
  EXPECT_EQ(0xFC00, FloatToFp16(-INFINITY));
  EXPECT_EQ(0x7BFF, FloatToFp16(65504.0f));
  EXPECT_EQ(0x7BFF, FloatToFp16(65519.99f));
  EXPECT_EQ(0x7C00, FloatToFp16(65520.0f));  // the tie rounds to even = Inf
  EXPECT_EQ(0x8000, FloatToFp16(-0.0f));
  EXPECT_EQ(0x0001, FloatToFp16(std::ldexp(1.0f, -24)));
  EXPECT_EQ(0x0000, FloatToFp16(std::ldexp(1.0f, -25)));  // tie to even (0)
  EXPECT_EQ(0x0002, FloatToFp16(std::ldexp(3.0f, -25)));  // tie to even (2)
  EXPECT_EQ(0x7E00, FloatToFp16(NAN) & 0x7E00);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::bit_cast<float>(0x7F800001u)))));  // sNaN
  EXPECT_EQ(0x7F80, FloatToBf16(INFINITY));
  EXPECT_EQ(0x7F80, FloatToBf16(std::numeric_limits<float>::max()));  // rounds up to Inf
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0xFFFFFFFFu)))));
}

}  // namespace
}  // namespace strata
