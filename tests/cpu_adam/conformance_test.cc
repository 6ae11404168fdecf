// Every kernel (ISA x optimizer x gradient dtype x copy dtype, fp32 included) against the
// double-precision ReferenceStep, on sizes that are not multiples of any SIMD width, over several
// steps.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cpu_adam/cpu_optimizer.h"
#include "tests/cpu_adam/optimizer_problem.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::DoubleState;
using testing::OptimizerProblem;

enum class Variant { kAdamW, kAdamL2, kAdamNoBiasCorrection, kAdagrad, kLion };
enum class Copy { kNone, kFp16, kBf16, kFp32 };

const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kAdamW:
      return "adamw";
    case Variant::kAdamL2:
      return "adam_l2";
    case Variant::kAdamNoBiasCorrection:
      return "adamw_nobias";
    case Variant::kAdagrad:
      return "adagrad";
    case Variant::kLion:
      return "lion";
  }
  return "?";
}

OptimizerKind KindOf(Variant v) {
  if (v == Variant::kAdagrad) return OptimizerKind::kAdagrad;
  if (v == Variant::kLion) return OptimizerKind::kLion;
  return OptimizerKind::kAdam;
}

Hyperparams HyperparamsOf(Variant v) {
  Hyperparams hp = DefaultHyperparams(KindOf(v));
  switch (v) {
    case Variant::kAdamW:
      hp.weight_decay = 0.1f;
      break;
    case Variant::kAdamL2:
      hp.adam_w_mode = false;
      hp.weight_decay = 0.01f;
      break;
    case Variant::kAdamNoBiasCorrection:
      hp.bias_correction = false;
      hp.weight_decay = 0.01f;
      break;
    case Variant::kAdagrad:
      hp.weight_decay = 0.01f;
      break;
    case Variant::kLion:
      hp.weight_decay = 0.1f;
      break;
  }
  return hp;
}

using Param = std::tuple<SimdIsa, Variant, DType, Copy>;

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [isa, variant, grad, copy] = info.param;
  const char* copy_name = copy == Copy::kNone   ? "nocopy"
                          : copy == Copy::kFp16 ? "fp16copy"
                          : copy == Copy::kBf16 ? "bf16copy"
                                                : "fp32copy";
  return std::string(SimdIsaName(isa)) + "_" + VariantName(variant) + "_" +
         std::string(DTypeName(grad)) + "grad_" + copy_name;
}

class CpuAdamKernelTest : public ::testing::TestWithParam<Param> {};

TEST_P(CpuAdamKernelTest, MatchesDoublePrecisionReference) {
  const auto& [isa, variant, grad_dtype, copy] = GetParam();
  if (!CpuSupports(isa)) {
    GTEST_SKIP() << "this CPU lacks " << SimdIsaName(isa) << " (has: " << CpuSimdFeatures() << ")";
  }
  CpuOptimizerOptions options;
  options.isa = isa;
  options.tile_numel = 64;  // many tiles, tails inside and at the end
  options.prefetch_bytes = 256;
  Result<CpuOptimizer> opt = CpuOptimizer::Create(KindOf(variant), options);
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  ASSERT_EQ(opt->isa(), isa);
  const Hyperparams hp = HyperparamsOf(variant);
  const uint64_t seed = testing::TestSeed();

  const size_t sizes[] = {1, 7, 13, 64, 209, 4099};
  const float scales[] = {1.0f, 1.0f / 1024, 0.37f};
  for (size_t si = 0; si < std::size(sizes); ++si) {
    const size_t n = sizes[si];
    const float grad_scale = scales[si % std::size(scales)];
    SCOPED_TRACE("numel " + std::to_string(n) + ", grad_scale " + std::to_string(grad_scale));
    OptimizerProblem prob(KindOf(variant), n, grad_dtype, copy != Copy::kNone,
                          copy == Copy::kFp16   ? DType::kFloat16
                          : copy == Copy::kFp32 ? DType::kFloat32
                                                : DType::kBFloat16,
                          grad_scale, seed + si);
    Result<int> group = opt->AddGroup(hp);
    ASSERT_TRUE(group.ok());
    for (int step = 1; step <= 6; ++step) {
      prob.NewGrads(seed * 31 + si * 7 + step);
      const DoubleState before(prob);
      const std::vector<double> grads = prob.GradsAsDouble();
      StepOptions so;
      so.grad_scale = grad_scale;
      ASSERT_TRUE(opt->Step(*group, prob.Tensors(), so).ok());
      const std::string diff = testing::CompareStep(before, grads, hp, step, prob);
      ASSERT_TRUE(diff.empty()) << "step " << step << ":\n" << diff;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllKernels, CpuAdamKernelTest,
    ::testing::Combine(::testing::Values(SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512),
                       ::testing::Values(Variant::kAdamW, Variant::kAdamL2,
                                         Variant::kAdamNoBiasCorrection, Variant::kAdagrad,
                                         Variant::kLion),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Copy::kNone, Copy::kFp16, Copy::kBf16, Copy::kFp32)),
    ParamName);

}  // namespace
}  // namespace strata
