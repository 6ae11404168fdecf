// The engine's step behaviour through the whole engine: fp16 loss scaling with an injected Inf
// gradient (DeepSpeed's skip / hysteresis / back-off / grow sequence), gradient accumulation,
// and stage 3's promise about what is gathered (never more than one module's parameters besides
// the persistent ones) and what the engine reports holding.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "offload/device/api/kernels.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/inf_injector.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

std::string Stage3Keys(const char* opt, const char* param) {
  return std::string("\"stage\": 3, \"stage3_param_persistence_threshold\": 200,") +
         " \"reduce_bucket_size\": 40000, \"offload_optimizer\": {\"device\": \"" + opt +
         "\", \"pin_memory\": false}, \"offload_param\": {\"device\": \"" + param +
         "\", \"pin_memory\": false}";
}

// Writes +Inf into the first element of `target`'s gradient slot before `module`'s backward
// when armed (the slot exists by then: the engine's hooks run first).
// DeepSpeed's DynamicLossScaler.update_scale (with its stable_interval), written out here as the
// oracle.
struct ReferenceScaler {
  double scale;
  int64_t window, hysteresis, cur_hysteresis, iter = 0, last_overflow = -1;
  void Update(bool overflow) {
    if (overflow) {
      if (hysteresis == 1 || cur_hysteresis == 1) {
        scale = std::max(scale / 2, 1.0);
      } else {
        --cur_hysteresis;
      }
      last_overflow = iter;
    } else {
      const int64_t stable = iter - last_overflow - 1;  // clean steps since the overflow
      if (stable > 0 && stable % window == 0) {
        cur_hysteresis = hysteresis;
        scale *= 2;
      }
    }
    ++iter;
  }
};

std::vector<std::vector<float>> Masters(Engine& e) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < e.layout().slices().size(); ++i) {
    std::vector<float> v(e.layout().slices()[i].numel);
    EXPECT_THAT(e.GatherMasterParameter(i, v), IsOk());
    out.push_back(std::move(v));
  }
  return out;
}

class EngineFp16Test : public ::testing::TestWithParam<int> {};

TEST_P(EngineFp16Test, InjectedInfGivesDeepSpeedsSkipBackoffHysteresisGrowSequence) {
  const int stage = GetParam();
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat16);
  const std::string zero =
      stage == 3 ? Stage3Keys("cpu", "cpu") : "\"stage\": " + std::to_string(stage);
  Config config = testing::MakeConfig(
      2, 1, zero,
      "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2,"
      " \"hysteresis\": 2},");
  EngineInit init;
  init.init_param = testing::TestInit(5);
  auto engine = Engine::Initialize(*model, config, *comm, *device, init);
  ASSERT_THAT(engine.status(), IsOk());
  Engine& e = **engine;
  testing::InfInjector inject(&model->lm_head().weight());
  model->lm_head().AddHooks(&inject);

  const testing::TokenData data = testing::RandomTokens(13, 10, 2, 16, 256);
  const bool overflow[] = {true, true, false, false, false, true, false, false, false, false};
  ReferenceScaler ref{256.0, 2, 2, 2};
  EXPECT_EQ(e.stats().loss_scale, 256.0);
  int64_t skipped = 0;
  for (size_t step = 0; step < std::size(overflow); ++step) {
    const auto before = Masters(e);
    inject.armed = overflow[step];
    ASSERT_THAT(e.Forward(data.Batch(step)), IsOk());
    ASSERT_THAT(e.Backward(), IsOk());
    ASSERT_THAT(e.Step(), IsOk());
    ref.Update(overflow[step]);
    skipped += overflow[step];
    EXPECT_EQ(e.stats().loss_scale, ref.scale) << "step " << step;
    EXPECT_EQ(e.stats().skipped_steps, skipped) << "step " << step;
    const auto after = Masters(e);
    EXPECT_EQ(before == after, overflow[step])
        << "step " << step << ": a skipped step changes nothing, others do";
  }
  // The sequence covered hysteresis (the first overflow keeps 256), back-off (128), growth after
  // the window (256), hysteresis again and growth again (512).
  EXPECT_EQ(ref.scale, 512.0);
  EXPECT_EQ(e.applied_steps(), 7);
  model->lm_head().RemoveHooksRecursive(&inject);
}

INSTANTIATE_TEST_SUITE_P(Stages, EngineFp16Test, ::testing::Values(0, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

class EngineAccumulationTest : public ::testing::TestWithParam<int> {};

TEST_P(EngineAccumulationTest, AccumulatingMicroBatchesEqualsOneLargerBatch) {
  // Two micro-batches of 2 sequences with gradient_accumulation_steps 2 == one batch of 4: the
  // same loss and the same (accumulated) gradient, seen through its norm. Tolerance 1e-5
  // relative: the same fp32 terms summed in another order (per micro-batch GEMMs then a sum, vs
  // one GEMM over 4 sequences); a few thousand terms of ~1e-7 relative rounding each stay far
  // below it, and a wrong 1/gas scaling would be off by 2x. Parameters are not compared: Adam's
  // first steps move each weight by about lr * sign(g), so a gradient that is ~0 may take either
  // sign under the two summation orders.
  const int stage = GetParam();
  const testing::TokenData small = testing::RandomTokens(5, 4, 2, 16, 256);
  testing::TokenData large;
  large.batch = 4;
  large.seq_len = 16;
  for (size_t i = 0; i + 1 < small.ids.size(); i += 2) {
    std::vector<int32_t> both = small.ids[i];
    both.insert(both.end(), small.ids[i + 1].begin(), small.ids[i + 1].end());
    large.ids.push_back(both);
  }
  struct Outcome {
    std::vector<float> losses;
    std::vector<double> norms;
  };
  auto run = [stage](const testing::TokenData& d, int64_t gas) {
    auto device = testing::MakeHostDevice();
    auto comm = testing::MakeLocalComm();
    auto model = testing::MakeTinyModel(device.get(), DType::kFloat32, /*tied=*/stage == 3);
    Config config = testing::MakeConfig(
        d.batch, gas,
        stage == 3 ? Stage3Keys("none", "cpu") : "\"stage\": " + std::to_string(stage));
    EngineInit init;
    init.init_param = testing::TestInit(3);
    auto engine = Engine::Initialize(*model, config, *comm, *device, init);
    EXPECT_THAT(engine.status(), IsOk());
    Outcome o;
    size_t next = 0;
    for (int step = 0; step < 2; ++step) {
      for (int64_t m = 0; m < gas; ++m) {
        EXPECT_THAT((*engine)->Forward(d.Batch(next++)), IsOk());
        o.losses.push_back((*engine)->Loss().value());
        EXPECT_THAT((*engine)->Backward(), IsOk());
        EXPECT_EQ((*engine)->IsGradientAccumulationBoundary(), m + 1 == gas);
        EXPECT_THAT((*engine)->Step(), IsOk());
      }
      o.norms.push_back((*engine)->stats().last_grad_norm);
    }
    EXPECT_EQ((*engine)->stats().global_steps, 2);
    return o;
  };
  const Outcome accumulated = run(small, 2);
  const Outcome whole = run(large, 1);
  ASSERT_EQ(accumulated.losses.size(), 4u);
  ASSERT_EQ(whole.losses.size(), 2u);
  EXPECT_NEAR((accumulated.losses[0] + accumulated.losses[1]) / 2, whole.losses[0],
              1e-5 * whole.losses[0]);
  EXPECT_NEAR(accumulated.norms[0], whole.norms[0], 1e-5 * whole.norms[0]);
  EXPECT_GT(whole.norms[0], 0.0);
}

INSTANTIATE_TEST_SUITE_P(Stages, EngineAccumulationTest, ::testing::Values(0, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// Counts, at every hook point, the non-persistent parameters that are gathered (data() set).
class LiveCounter final : public nn::ModuleHooks {
 public:
  LiveCounter(std::vector<nn::Parameter*> params, int64_t threshold)
      : params_(std::move(params)), threshold_(threshold) {}
  int max_live = 0;
  int persistent_missing = 0;
  int64_t points = 0;
  Status OnHook(nn::HookPoint, nn::Module&, const nn::RunContext&) override {
    int live = 0;
    for (const nn::Parameter* p : params_) {
      if (p->numel() > threshold_) {
        live += p->data() != nullptr;
      } else {
        persistent_missing += p->data() == nullptr;
      }
    }
    max_live = std::max(max_live, live);
    ++points;
    return Status::Ok();
  }

 private:
  std::vector<nn::Parameter*> params_;
  int64_t threshold_;
};

class EngineStage3Test : public ::testing::TestWithParam<bool> {};

TEST_P(EngineStage3Test, GathersAtMostOneModulesParametersBesidesPersistentOnes) {
  const bool checkpointing = GetParam();
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kBFloat16, /*tied=*/true, checkpointing);
  // No prefetch (stage3_prefetch_bucket_size 0): gathers happen only in a module's own hooks
  // (tests/engine/coordinator bounds the prefetching case).
  Config config =
      testing::MakeConfig(2, 1, Stage3Keys("cpu", "cpu") + ", \"stage3_prefetch_bucket_size\": 0",
                          "\"bf16\": {\"enabled\": true},");
  EngineInit init;
  init.init_param = testing::TestInit(5);
  auto engine = Engine::Initialize(*model, config, *comm, *device, init);
  ASSERT_THAT(engine.status(), IsOk());
  // Every module of the tiny Llama uses at most one parameter over the threshold (each Linear
  // and the embedding one; the tied head the embedding's): the most a correct stage 3 gathers.
  int64_t one_module = 0;
  for (nn::Module* m : model->Modules()) {
    int64_t n = 0;
    for (const nn::Parameter* p : m->own_parameters()) n += p->numel() > 200;
    for (const nn::Parameter* p : m->external_parameters()) n += p->numel() > 200;
    one_module = std::max(one_module, n);
  }
  ASSERT_EQ(one_module, 1);
  LiveCounter counter(model->NamedParameters(), 200);
  model->AddHooksRecursive(&counter);  // after the engine's: sees what they gathered
  const testing::TokenData data = testing::RandomTokens(3, 2, 2, 16, 256);
  testing::TrainAndGather(**engine, data, 2, 1);
  model->RemoveHooksRecursive(&counter);
  EXPECT_GT(counter.points, 0);
  EXPECT_EQ(counter.max_live, one_module);
  EXPECT_EQ(counter.persistent_missing, 0);
  // Between steps nothing but the persistent parameters is gathered.
  for (const nn::Parameter* p : model->NamedParameters()) {
    EXPECT_EQ(p->data() != nullptr, p->numel() <= 200) << p->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, EngineStage3Test, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "recompute" : "plain");
});

TEST(EngineStage3Test, HoldsLessOnTheDeviceThanStageZeroAndSaysSo) {
  auto run = [](const std::string& zero) {
    auto device = testing::MakeHostDevice();
    auto comm = testing::MakeLocalComm();
    auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
    Config config = testing::MakeConfig(2, 1, zero);
    EngineInit init;
    init.init_param = testing::TestInit(5);
    auto engine = Engine::Initialize(*model, config, *comm, *device, init);
    EXPECT_THAT(engine.status(), IsOk());
    const testing::TokenData data = testing::RandomTokens(3, 1, 2, 16, 256);
    testing::TrainAndGather(**engine, data, 1, 1);
    return (*engine)->stats();
  };
  const EngineStats s0 = run("\"stage\": 0");
  const EngineStats s3 = run(Stage3Keys("none", "none"));
  const EngineStats s3cpu = run(Stage3Keys("cpu", "cpu"));
  // Stage 0: full params + full fp32 gradients + the optimizer state (4 arrays) on the device.
  EXPECT_GT(s0.device_bytes, 0u);
  EXPECT_EQ(s0.cpu_bytes, 0u);
  EXPECT_LT(s3.device_bytes, s0.device_bytes);
  EXPECT_LT(s3cpu.device_bytes, s3.device_bytes);
  EXPECT_GT(s3cpu.cpu_bytes, 0u);
  // Peaks include what was gathered during forward/backward.
  EXPECT_GT(s3.device_peak_bytes, s3.device_bytes);
  EXPECT_GE(s0.device_peak_bytes, s0.device_bytes);
}

}  // namespace
}  // namespace strata
