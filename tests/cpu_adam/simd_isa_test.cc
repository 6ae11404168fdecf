// Run-time ISA detection and the STRATA_SIMD override.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "cpu_adam/cpu_optimizer.h"
#include "cpu_adam/simd/simd_isa.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

// Sets STRATA_SIMD for one scope and restores the previous value.
class ScopedSimdEnv {
 public:
  explicit ScopedSimdEnv(const char* value) {
    if (const char* old = getenv("STRATA_SIMD")) old_ = old;
    setenv("STRATA_SIMD", value, 1);
  }
  ~ScopedSimdEnv() {
    if (old_) {
      setenv("STRATA_SIMD", old_->c_str(), 1);
    } else {
      unsetenv("STRATA_SIMD");
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(CpuAdamSimdIsaTest, ParsesNamesAndRejectsUnknownOnes) {
  for (SimdIsa isa : {SimdIsa::kAuto, SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    Result<SimdIsa> r = ParseSimdIsa(SimdIsaName(isa));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, isa);
  }
  EXPECT_THAT(ParseSimdIsa("sse9"),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("unknown SIMD ISA 'sse9' (allowed: auto, scalar, avx2, avx512)")));
}

TEST(CpuAdamSimdIsaTest, ScalarIsAlwaysSupportedAndBestIsSupported) {
  EXPECT_TRUE(CpuSupports(SimdIsa::kScalar));
  EXPECT_TRUE(CpuSupports(BestSupportedIsa()));
  if (CpuSupports(SimdIsa::kAvx512)) {
    EXPECT_TRUE(CpuSupports(SimdIsa::kAvx2));
  }
  EXPECT_FALSE(CpuSimdFeatures().empty());
}

TEST(CpuAdamSimdIsaTest, AutoPicksBestWithoutOverride) {
  ScopedSimdEnv env("");
  Result<SimdIsa> r = ResolveSimdIsa(SimdIsa::kAuto);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, BestSupportedIsa());
}

TEST(CpuAdamSimdIsaTest, EnvironmentOverridesAuto) {
  ScopedSimdEnv env("scalar");
  Result<CpuOptimizer> opt = CpuOptimizer::Create(OptimizerKind::kAdam);
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  EXPECT_EQ(opt->isa(), SimdIsa::kScalar);
  EXPECT_STREQ(opt->kernel_name(), "scalar");
}

TEST(CpuAdamSimdIsaTest, ExplicitIsaWinsOverEnvironment) {
  ScopedSimdEnv env("scalar");
  Result<SimdIsa> r = ResolveSimdIsa(BestSupportedIsa());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, BestSupportedIsa());
}

TEST(CpuAdamSimdIsaTest, UnknownEnvironmentValueIsInvalidArgument) {
  ScopedSimdEnv env("avx9000");
  EXPECT_THAT(CpuOptimizer::Create(OptimizerKind::kAdam),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("STRATA_SIMD"), HasSubstr("unknown SIMD ISA 'avx9000'"))));
}

TEST(CpuAdamSimdIsaTest, UnsupportedIsaIsUnavailable) {
  if (CpuSupports(SimdIsa::kAvx512)) GTEST_SKIP() << "this CPU has AVX-512: nothing unsupported";
  ScopedSimdEnv env("avx512");
  EXPECT_THAT(CpuOptimizer::Create(OptimizerKind::kAdam),
              StatusIs(StatusCode::kUnavailable, AllOf(HasSubstr("STRATA_SIMD SIMD ISA avx512"),
                                                       HasSubstr("is not supported by this CPU"))));
  CpuOptimizerOptions o;
  o.isa = SimdIsa::kAvx512;
  EXPECT_THAT(CpuOptimizer::Create(OptimizerKind::kAdam, o),
              StatusIs(StatusCode::kUnavailable,
                       AllOf(HasSubstr("SIMD ISA avx512 is not supported by this CPU"),
                             HasSubstr("allowed here: scalar"))));
}

}  // namespace
}  // namespace strata
