// CpuOptimizer's contract: argument checking, step counters and groups, thread-count and tiling
// invariance (bitwise), the per-tile callback, fused gradient scaling, and a long trajectory
// against a run kept entirely in double precision.
#include "cpu_adam/cpu_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "cpu_adam/reference_step.h"
#include "tests/cpu_adam/optimizer_problem.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::OptimizerProblem;
using testing::StatusIs;

CpuOptimizer MakeOptimizer(OptimizerKind kind, CpuOptimizerOptions o = {}) {
  Result<CpuOptimizer> r = CpuOptimizer::Create(kind, o);
  STRATA_CHECK_MSG(r.ok(), r.status().ToString());
  return std::move(r).value();
}

TEST(CpuAdamOptimizerTest, RejectsBadOptions) {
  CpuOptimizerOptions o;
  o.tile_numel = 100;
  EXPECT_THAT(CpuOptimizer::Create(OptimizerKind::kAdam, o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cpu optimizer: tile_numel = 100"),
                             HasSubstr("allowed: a positive multiple of 64"))));
  o = {};
  o.num_threads = -1;
  EXPECT_THAT(
      CpuOptimizer::Create(OptimizerKind::kAdam, o),
      StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("cpu optimizer: num_threads = -1"),
                                                   HasSubstr("0 = caller's arena, or > 0"))));
}

TEST(CpuAdamOptimizerTest, RejectsBadHyperparamsNamingTheField) {
  CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam);
  Hyperparams hp;
  hp.beta2 = 1.0f;
  EXPECT_THAT(opt.AddGroup(hp), StatusIs(StatusCode::kInvalidArgument,
                                         HasSubstr("optimizer hyperparameter beta2 = 1.0")));
  hp = {};
  hp.lr = -1;
  EXPECT_THAT(opt.AddGroup(hp), StatusIs(StatusCode::kInvalidArgument,
                                         AllOf(HasSubstr("optimizer hyperparameter lr = -1.0"),
                                               HasSubstr("allowed:"))));
  hp = {};
  hp.weight_decay = NAN;
  EXPECT_THAT(opt.AddGroup(hp), StatusIs(StatusCode::kInvalidArgument,
                                         HasSubstr("optimizer hyperparameter weight_decay = ")));
  ASSERT_THAT(opt.AddGroup({}), IsOk());
  EXPECT_THAT(opt.SetLearningRate(0, INFINITY),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("lr = inf")));
  EXPECT_THAT(opt.SetLearningRate(5, 1e-3f),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("parameter group 5 does not exist (1 groups)")));
}

TEST(CpuAdamOptimizerTest, RejectsBadTensorsAndModifiesNothing) {
  CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam);
  ASSERT_TRUE(opt.AddGroup({}).ok());
  OptimizerProblem prob(OptimizerKind::kAdam, 100, DType::kFloat32, true, DType::kBFloat16, 1,
                        testing::TestSeed());
  const std::vector<float> p0 = prob.params;
  auto expect_invalid = [&](StepTensors t, const char* needle, StepOptions so = {}) {
    EXPECT_THAT(opt.Step(0, t, so), StatusIs(StatusCode::kInvalidArgument, HasSubstr(needle)));
  };
  StepTensors t = prob.Tensors();
  t.exp_avg_sq = nullptr;
  expect_invalid(t, "exp_avg_sq is null");
  t = prob.Tensors();
  t.grads = prob.params.data() + 50;
  expect_invalid(t, "overlap");
  t = prob.Tensors();
  t.exp_avg = reinterpret_cast<float*>(reinterpret_cast<char*>(prob.exp_avg.data()) + 2);
  t.numel = 10;
  expect_invalid(t, "exp_avg is not aligned");
  t = prob.Tensors();
  t.param_copy_dtype = static_cast<DType>(9);
  expect_invalid(t, "param_copy_dtype 9 (allowed: fp32, fp16, bf16)");
  t = prob.Tensors();
  t.grad_dtype = static_cast<DType>(7);
  expect_invalid(t, "grad_dtype 7");
  StepOptions so;
  so.grad_scale = 0;
  expect_invalid(prob.Tensors(), "grad_scale", so);
  so.grad_scale = NAN;
  expect_invalid(prob.Tensors(), "grad_scale", so);
  EXPECT_THAT(opt.Step(1, prob.Tensors()), StatusIs(StatusCode::kInvalidArgument,
                                                    HasSubstr("parameter group 1 does not exist")));
  EXPECT_THAT(opt.StepAt({}, 0, prob.Tensors()),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("adam step: step number 0 (allowed: >= 1)")));
  EXPECT_EQ(prob.params, p0);
  EXPECT_EQ(*opt.step_count(0), 0);
}

TEST(CpuAdamOptimizerTest, StepCountersArePerGroupAndMatchExplicitSteps) {
  CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam);
  Hyperparams a, b;
  b.lr = 5e-3f;
  ASSERT_EQ(*opt.AddGroup(a), 0);
  ASSERT_EQ(*opt.AddGroup(b), 1);
  const uint64_t seed = testing::TestSeed();
  OptimizerProblem x(OptimizerKind::kAdam, 333, DType::kFloat32, false, {}, 1, seed);
  OptimizerProblem y = x;
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(opt.Step(1, x.Tensors()).ok());
    ASSERT_TRUE(opt.StepAt(b, s, y.Tensors()).ok());
  }
  EXPECT_EQ(*opt.step_count(0), 0);
  EXPECT_EQ(*opt.step_count(1), 3);
  EXPECT_EQ(x.params, y.params);
  EXPECT_EQ(x.exp_avg_sq, y.exp_avg_sq);
  ASSERT_TRUE(opt.SetStepCount(0, 41).ok());
  ASSERT_TRUE(opt.Step(0, x.Tensors()).ok());
  ASSERT_TRUE(opt.StepAt(a, 42, y.Tensors()).ok());
  EXPECT_EQ(x.params, y.params);
  EXPECT_THAT(opt.SetStepCount(0, -1),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("step count -1 (allowed: >= 0)")));
}

TEST(CpuAdamOptimizerTest, EmptyTensorIsANoOpStep) {
  CpuOptimizer opt = MakeOptimizer(OptimizerKind::kLion);
  ASSERT_TRUE(opt.AddGroup(DefaultHyperparams(OptimizerKind::kLion)).ok());
  ASSERT_TRUE(opt.Step(0, StepTensors{}).ok());
  EXPECT_EQ(*opt.step_count(0), 1);
}

// Results must not depend on threads, arenas or tile size: every element is computed by the same
// instructions wherever it falls.
TEST(CpuAdamOptimizerTest, BitwiseIdenticalAcrossThreadCountsAndTileSizes) {
  const uint64_t seed = testing::TestSeed();
  for (SimdIsa isa : {SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    SCOPED_TRACE(std::string(SimdIsaName(isa)));
    OptimizerProblem base(OptimizerKind::kAdam, 300007, DType::kBFloat16, true, DType::kBFloat16,
                          1.0f / 256, seed);
    struct Run {
      int threads;  // 0: caller's arena limited by global_control to 1 thread
      size_t tile;
    };
    std::vector<OptimizerProblem> results;
    for (Run run : {Run{0, 4096}, Run{2, 4096}, Run{2, 64}, Run{3, 1 << 20}, Run{1, 640}}) {
      CpuOptimizerOptions o;
      o.isa = isa;
      o.tile_numel = run.tile;
      o.num_threads = run.threads;
      o.prefetch_bytes = run.threads == 2 ? 1024 : 0;
      CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam, o);
      ASSERT_TRUE(opt.AddGroup({}).ok());
      OptimizerProblem prob = base;
      StepOptions so;
      so.grad_scale = 1.0f / 256;
      for (int s = 0; s < 3; ++s) {
        if (run.threads == 0) {
          tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
          ASSERT_TRUE(opt.Step(0, prob.Tensors(), so).ok());
        } else {
          ASSERT_TRUE(opt.Step(0, prob.Tensors(), so).ok());
        }
      }
      results.push_back(std::move(prob));
    }
    for (size_t i = 1; i < results.size(); ++i) {
      EXPECT_EQ(results[i].params, results[0].params) << "run " << i;
      EXPECT_EQ(results[i].exp_avg, results[0].exp_avg) << "run " << i;
      EXPECT_EQ(results[i].exp_avg_sq, results[0].exp_avg_sq) << "run " << i;
      EXPECT_EQ(results[i].copy, results[0].copy) << "run " << i;
    }
  }
}

TEST(CpuAdamOptimizerTest, TileCallbackSeesEveryFinishedTileOnce) {
  CpuOptimizerOptions o;
  o.tile_numel = 1024;
  o.num_threads = 2;
  CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam, o);
  ASSERT_TRUE(opt.AddGroup({}).ok());
  const size_t n = 10 * 1024 + 77;
  OptimizerProblem prob(OptimizerKind::kAdam, n, DType::kFloat16, true, DType::kFloat16, 1,
                        testing::TestSeed());
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> ranges;
  bool copies_final = true;
  StepOptions so;
  so.on_tile_done = [&](size_t begin, size_t end) {
    bool ok = true;
    for (size_t i = begin; i < end; ++i) ok &= prob.copy[i] == FloatToFp16(prob.params[i]);
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(begin, end);
    copies_final &= ok;
  };
  ASSERT_TRUE(opt.Step(0, prob.Tensors(), so).ok());
  EXPECT_TRUE(copies_final);
  std::sort(ranges.begin(), ranges.end());
  ASSERT_EQ(ranges.size(), 11u);
  for (size_t t = 0; t < ranges.size(); ++t) {
    EXPECT_EQ(ranges[t].first, t * 1024);
    EXPECT_EQ(ranges[t].second, std::min(n, (t + 1) * 1024));
  }
}

// Fused scaling computes g * scale as its first rounding, exactly as scaling the gradients in a
// separate pass would: the results are identical.
TEST(CpuAdamOptimizerTest, FusedGradScaleEqualsPrescaledGradients) {
  for (SimdIsa isa : {SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    CpuOptimizerOptions o;
    o.isa = isa;
    CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam, o);
    Hyperparams hp;
    hp.adam_w_mode = false;
    hp.weight_decay = 0.01f;
    OptimizerProblem fused(OptimizerKind::kAdam, 1001, DType::kFloat32, false, {}, 0.37f,
                           testing::TestSeed());
    OptimizerProblem pre = fused;
    for (float& g : pre.grads_f32) g *= 0.37f;
    StepOptions so;
    so.grad_scale = 0.37f;
    ASSERT_TRUE(opt.StepAt(hp, 1, fused.Tensors(), so).ok());
    ASSERT_TRUE(opt.StepAt(hp, 1, pre.Tensors()).ok());
    EXPECT_EQ(fused.params, pre.params) << SimdIsaName(isa);
    EXPECT_EQ(fused.exp_avg_sq, pre.exp_avg_sq) << SimdIsaName(isa);
  }
}

// 300 AdamW steps with fresh gradients each step, float kernels vs a run kept in double
// throughout: rounding errors must stay small and must not grow into drift.
TEST(CpuAdamOptimizerTest, LongTrajectoryStaysCloseToDoublePrecision) {
  const uint64_t seed = testing::TestSeed();
  for (SimdIsa isa : {SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    CpuOptimizerOptions o;
    o.isa = isa;
    CpuOptimizer opt = MakeOptimizer(OptimizerKind::kAdam, o);
    Hyperparams hp;
    hp.weight_decay = 0.05f;
    ASSERT_TRUE(opt.AddGroup(hp).ok());
    OptimizerProblem prob(OptimizerKind::kAdam, 1000, DType::kFloat32, false, {}, 1, seed);
    testing::DoubleState ref(prob);
    for (int s = 1; s <= 300; ++s) {
      prob.NewGrads(seed + s);
      const std::vector<double> g = prob.GradsAsDouble();
      ReferenceStep(OptimizerKind::kAdam, hp, s, 1.0, g.data(), ref.params.data(),
                    ref.exp_avg.data(), ref.exp_avg_sq.data(), prob.numel);
      ASSERT_TRUE(opt.Step(0, prob.Tensors()).ok());
    }
    double max_p = 0, max_m = 0;
    for (size_t i = 0; i < prob.numel; ++i) {
      max_p = std::max(max_p, std::fabs(prob.params[i] - ref.params[i]));
      max_m = std::max(max_m, std::fabs(prob.exp_avg[i] - ref.exp_avg[i]));
    }
    // |p| <= ~1.3; 300 steps of at most ~1 float rounding each: 300 * 2^-24 * 1.3 ~ 2.3e-5.
    EXPECT_LT(max_p, 2e-5) << SimdIsaName(isa);
    EXPECT_LT(max_m, 1e-7) << SimdIsaName(isa);
  }
}

}  // namespace
}  // namespace strata
