// The two host kernel paths (AVX2+F16C and scalar) agree bitwise on elementwise ops, and closely
// on sums; the device conformance suite checks the chosen path against the double reference.
#include "offload/device/host/host_kernels.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/offload/typed_data.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using internal::HostKernelIsa;
using internal::RunHostKernel;

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

class HostKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (internal::DetectHostKernelIsa() != HostKernelIsa::kAvx2) {
      GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C: only the scalar path exists here";
    }
  }
  // Runs `k` with each path on its own copy of `dst_init`; returns both outputs.
  std::pair<std::vector<uint8_t>, std::vector<uint8_t>> RunBoth(KernelLaunch k,
                                                                const std::vector<uint8_t>& init) {
    std::vector<uint8_t> a = init, b = init;
    k.dst = a.data();
    EXPECT_TRUE(RunHostKernel(k, HostKernelIsa::kScalar).ok());
    k.dst = b.data();
    EXPECT_TRUE(RunHostKernel(k, HostKernelIsa::kAvx2).ok());
    return {a, b};
  }
};

TEST_F(HostKernelsTest, VectorAndScalarPathsAgreeBitwiseOnElementwiseOps) {
  uint64_t seed = testing::TestSeed();
  for (size_t n : {size_t{5}, size_t{8}, size_t{1003}, (size_t{1} << 16) * 3 + 9}) {
    for (DType s : kTypes) {
      for (DType d : kTypes) {
        auto src = testing::RandomTensor(s, n, ++seed);
        // Sprinkle specials: the two paths must agree on them too.
        testing::SetValue(s, src, 0, NAN);
        testing::SetValue(s, src, n / 2, -INFINITY);
        auto src2 = testing::RandomTensor(s, n, ++seed);
        std::vector<uint8_t> dst(n * DTypeBytes(d), 0);
        KernelLaunch k;
        k.numel = n;
        k.src = src.data();
        k.src_dtype = s;
        k.dst_dtype = d;
        k.op = KernelOp::kCast;
        auto [c1, c2] = RunBoth(k, dst);
        EXPECT_EQ(c1, c2) << "cast " << DTypeName(s) << "->" << DTypeName(d) << " n=" << n;
        k.op = KernelOp::kFill;
        k.value = 3.14159f;
        auto [f1, f2] = RunBoth(k, dst);
        EXPECT_EQ(f1, f2) << "fill " << DTypeName(d);
        if (s == d) {
          k.op = KernelOp::kScale;
          k.alpha = -0.37f;
          auto [s1, s2] = RunBoth(k, dst);
          EXPECT_EQ(s1, s2) << "scale " << DTypeName(d) << " n=" << n;
        }
        // add: dst/a of type d, b of type s.
        auto a = testing::RandomTensor(d, n, ++seed);
        k.op = KernelOp::kAdd;
        k.src = a.data();
        k.src_dtype = d;
        k.src2 = src2.data();
        k.src2_dtype = s;
        k.alpha = 0.75f;
        auto [a1, a2] = RunBoth(k, dst);
        EXPECT_EQ(a1, a2) << "add " << DTypeName(d) << " += " << DTypeName(s) << " n=" << n;
      }
    }
  }
}

TEST_F(HostKernelsTest, VectorAndScalarPathsAgreeOnReductions) {
  uint64_t seed = testing::TestSeed() + 7;
  for (DType t : kTypes) {
    const size_t n = (size_t{1} << 17) + 3;
    auto src = testing::RandomTensor(t, n, ++seed);
    KernelLaunch k;
    k.op = KernelOp::kL2NormPartials;
    k.numel = n;
    k.src = src.data();
    k.src_dtype = t;
    float p1[5], p2[5];
    k.num_partials = 5;
    k.partials = p1;
    ASSERT_TRUE(RunHostKernel(k, HostKernelIsa::kScalar).ok());
    k.partials = p2;
    ASSERT_TRUE(RunHostKernel(k, HostKernelIsa::kAvx2).ok());
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(p1[i], p2[i], 1e-6 * p1[i]);
    uint32_t f1 = 0, f2 = 0;
    testing::SetValue(t, src, n - 1, NAN);  // in the scalar tail of the vector path
    k.op = KernelOp::kCheckFinite;
    k.flag = &f1;
    ASSERT_TRUE(RunHostKernel(k, HostKernelIsa::kScalar).ok());
    k.flag = &f2;
    ASSERT_TRUE(RunHostKernel(k, HostKernelIsa::kAvx2).ok());
    EXPECT_EQ(1u, f1);
    EXPECT_EQ(1u, f2);
  }
}

}  // namespace
}  // namespace strata
