// The promise "same math, any placement" for the engine at world 1: every ZeRO stage with the
// optimizer on the device or offloaded to the CPU gives bit-identical parameters to stage 0 with
// nothing offloaded, for fp32 and bf16 training. (Multi-rank runs: engine_mpi_test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct Placement {
  int stage;
  const char* offload;  // offload_optimizer.device
  DType dtype;
};

std::string PlacementName(const ::testing::TestParamInfo<Placement>& info) {
  return "stage" + std::to_string(info.param.stage) + "_" + info.param.offload + "_" +
         std::string(DTypeName(info.param.dtype));
}

std::string DtypeKeys(DType d) {
  if (d == DType::kBFloat16) return "\"bf16\": {\"enabled\": true},";
  if (d == DType::kFloat16) return "\"fp16\": {\"enabled\": true},";
  return "";
}

std::vector<std::vector<float>> RunPlacement(const Placement& p, const testing::TokenData& data,
                                             int steps, std::vector<float>* losses = nullptr) {
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), p.dtype);
  Config config = testing::MakeConfig(
      data.batch, 1,
      "\"stage\": " + std::to_string(p.stage) + ", \"sub_group_size\": 3000," +
          " \"offload_optimizer\": {\"device\": \"" + p.offload + "\", \"pin_memory\": false}",
      DtypeKeys(p.dtype));
  EngineInit init;
  init.init_param = testing::TestInit(7);
  Result<std::unique_ptr<Engine>> engine = Engine::Initialize(*model, config, *comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk());
  if (!engine.ok()) return {};
  return testing::TrainAndGather(**engine, data, steps, 1, losses);
}

class EngineSameMathTest : public ::testing::TestWithParam<Placement> {};

TEST_P(EngineSameMathTest, EqualsStageZeroWithNothingOffloadedBitwise) {
  const Placement p = GetParam();
  const testing::TokenData data = testing::RandomTokens(11, 3, 2, 16, 256);
  std::vector<float> base_losses, losses;
  const auto base = RunPlacement({0, "none", p.dtype}, data, 3, &base_losses);
  const auto got = RunPlacement(p, data, 3, &losses);
  ASSERT_EQ(base.size(), got.size());
  for (size_t i = 0; i < base.size(); ++i) {
    ASSERT_EQ(base[i].size(), got[i].size());
    EXPECT_EQ(std::memcmp(base[i].data(), got[i].data(), base[i].size() * sizeof(float)), 0)
        << "parameter " << i;
  }
  EXPECT_EQ(base_losses, losses);
  // Training moved the weights and the loss went down.
  ASSERT_EQ(losses.size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    Placements, EngineSameMathTest,
    ::testing::Values(Placement{1, "none", DType::kFloat32}, Placement{2, "none", DType::kFloat32},
                      Placement{1, "cpu", DType::kFloat32}, Placement{2, "cpu", DType::kFloat32},
                      Placement{2, "none", DType::kBFloat16}, Placement{1, "cpu", DType::kBFloat16},
                      Placement{2, "cpu", DType::kBFloat16}),
    PlacementName);

TEST(EngineTest, AccumulatingMicroBatchesEqualsOneLargerBatch) {
  // Two micro-batches of 2 sequences with gradient_accumulation_steps 2 == one batch of 4: the
  // same loss and the same (accumulated) gradient, seen through its norm. Parameters are not
  // compared: Adam's first steps move each weight by about lr * sign(g), so a gradient that is
  // ~0 may take either sign under the two summation orders.
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
  auto run = [](const testing::TokenData& d, int64_t gas) {
    auto device = testing::MakeHostDevice();
    auto comm = testing::MakeLocalComm();
    auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
    Config config = testing::MakeConfig(d.batch, gas, "\"stage\": 2");
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
  // Step 1 starts from the same weights: the mean of the two micro-batch losses is the big
  // batch's loss, and the accumulated gradient has the big batch's norm (fp32 rounding only).
  EXPECT_NEAR((accumulated.losses[0] + accumulated.losses[1]) / 2, whole.losses[0],
              1e-5 * whole.losses[0]);
  EXPECT_NEAR(accumulated.norms[0], whole.norms[0], 1e-5 * whole.norms[0]);
  EXPECT_GT(whole.norms[0], 0.0);
}

TEST(EngineTest, RefusesWhatIsNotBuiltYetNamingTheKey) {
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  Config stage3 = testing::MakeConfig(2, 1, "\"stage\": 3");
  EXPECT_THAT(Engine::Initialize(*model, stage3, *comm, *device, init).status(),
              StatusIs(StatusCode::kUnimplemented, HasSubstr("zero_optimization.stage = 3")));
  Config bf16 = testing::MakeConfig(2, 1, "\"stage\": 1", "\"bf16\": {\"enabled\": true},");
  EXPECT_THAT(Engine::Initialize(*model, bf16, *comm, *device, init).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("trains in bf16")));
}

TEST(EngineTest, DeviceMemoryIsABudgetNamingWhatDidNotFit) {
  auto device = testing::MakeHostDevice(uint64_t{1} << 20);  // 1 MiB: the tiny model's 4 MiB won't
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  Config config = testing::MakeConfig(2, 1, "\"stage\": 1");
  EXPECT_THAT(Engine::Initialize(*model, config, *comm, *device, init).status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("engine: ")));
}

}  // namespace
}  // namespace strata
