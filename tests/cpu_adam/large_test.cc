// 10M elements per supported ISA (every kernel path at scale, two steps), separate so that
// `ctest -L unit` stays quick.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu_adam/cpu_optimizer.h"
#include "tests/cpu_adam/optimizer_problem.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

class CpuAdamLargeTest : public ::testing::TestWithParam<SimdIsa> {};

TEST_P(CpuAdamLargeTest, TenMillionElementsMatchReference) {
  const SimdIsa isa = GetParam();
  if (!CpuSupports(isa)) {
    GTEST_SKIP() << "this CPU lacks " << SimdIsaName(isa) << " (has: " << CpuSimdFeatures() << ")";
  }
  CpuOptimizerOptions o;
  o.isa = isa;
  o.num_threads = 2;
  o.prefetch_bytes = 512;
  Result<CpuOptimizer> opt = CpuOptimizer::Create(OptimizerKind::kAdam, o);
  ASSERT_TRUE(opt.ok());
  Hyperparams hp;
  hp.weight_decay = 0.1f;
  ASSERT_TRUE(opt->AddGroup(hp).ok());
  const size_t n = 10'000'000 + 3;
  const uint64_t seed = testing::TestSeed();
  testing::OptimizerProblem prob(OptimizerKind::kAdam, n, DType::kBFloat16, true, DType::kBFloat16,
                                 1.0f / 65536, seed);
  StepOptions so;
  so.grad_scale = 1.0f / 65536;
  for (int step = 1; step <= 2; ++step) {
    if (step > 1) prob.NewGrads(seed + step);
    const testing::DoubleState before(prob);
    const std::vector<double> grads = prob.GradsAsDouble();
    ASSERT_TRUE(opt->Step(0, prob.Tensors(), so).ok());
    const std::string diff = testing::CompareStep(before, grads, hp, step, prob);
    ASSERT_TRUE(diff.empty()) << "step " << step << ":\n" << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuAdamLargeTest,
                         ::testing::Values(SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512),
                         [](const auto& info) { return std::string(SimdIsaName(info.param)); });

}  // namespace
}  // namespace strata
