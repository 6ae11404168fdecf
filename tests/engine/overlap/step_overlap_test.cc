// strata.overlap_step (engine/overlap/step_overlap.h): the optimizer sub-groups updated during the
// boundary micro-batch's backward give parameters and losses bitwise equal to the serial step —
// stages 2 and 3, optimizer on cpu and nvme, fp32 / bf16 / fp16, no clipping, a clip that
// triggers (the early updates are rolled back and redone) and one that does not, gradient
// accumulation 2, >= 4 sub-groups, overlap_comm on and off; an fp16 overflow step is skipped
// exactly; and sub-groups really are updated before the backward has been enqueued to its end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include <chrono>
#include <limits>
#include <thread>

#include "models/llama/model/llama_layers.h"
#include "offload/device/api/kernels.h"
#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/inf_injector.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::OverlapCase;
using testing::OverlapRun;
using testing::OverlapRunOptions;
using testing::SameBits;

using testing::kClipIdle;
using testing::kClipTriggers;

class StepOverlapSameMathTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(StepOverlapSameMathTest, ParametersAndLossesEqualTheSerialStepBitwise) {
  const OverlapCase& c = GetParam();
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  OverlapRunOptions o;
  o.nvme_dir = dir.File("serial");
  const OverlapRun serial = testing::RunOverlapCase(*comm, c, false, o);
  o.nvme_dir = dir.File("overlap");
  const OverlapRun overlapped = testing::RunOverlapCase(*comm, c, true, o);
  ASSERT_GE(serial.sub_groups, 4);
  EXPECT_EQ(serial.overlapped, 0);
  EXPECT_GT(overlapped.overlapped, 0) << "no sub-group was updated during backward";
  EXPECT_TRUE(SameBits(serial.masters, overlapped.masters));
  ASSERT_EQ(serial.norms.size(), overlapped.norms.size());  // the norms' chunk sums: same bits
  for (size_t i = 0; i < serial.norms.size(); ++i) {
    EXPECT_EQ(std::memcmp(&serial.norms[i], &overlapped.norms[i], sizeof(double)), 0)
        << "step " << i << ": " << serial.norms[i] << " vs " << overlapped.norms[i];
  }
  // offload_param nvme: every sub-group updated early had its parameters written back by the
  // overlapped step (at Finish at the latest), the step wrote the rest.
  if (std::string(c.param) == "nvme") {
    EXPECT_EQ(overlapped.param_write_backs, overlapped.overlapped);
  } else {
    EXPECT_EQ(overlapped.param_write_backs, 0);
  }
  ASSERT_EQ(serial.losses.size(), overlapped.losses.size());
  EXPECT_TRUE(SameBits({serial.losses}, {overlapped.losses})) << "the compute-dtype copies differ";
  EXPECT_EQ(serial.skipped, overlapped.skipped);
  testing::ExpectClipAsNamed(c, serial.norms);
}

std::vector<OverlapCase> SameMathCases() {
  std::vector<OverlapCase> cases;
  int k = 0;
  for (int stage : {2, 3}) {
    for (const char* opt : {"cpu", "nvme"}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        for (double clip : {0.0, kClipTriggers, kClipIdle}) {
          OverlapCase c;
          c.stage = stage;
          c.opt = opt;
          static const char* const kParams[] = {"cpu", "none", "nvme"};
          c.param = stage == 3 ? kParams[(k + k / 3) % 3] : "none";  // every clip and dtype
          c.dtype = dtype;
          c.clip = clip;
          c.overlap_comm = (k / 2) % 2 == 1;
          cases.push_back(c);
          ++k;
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, StepOverlapSameMathTest, ::testing::ValuesIn(SameMathCases()),
                         [](const auto& info) { return testing::OverlapCaseName(info.param); });

class StepOverlapOverflowTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(StepOverlapOverflowTest, AnOverflowStepIsSkippedExactly) {
  OverlapCase c = GetParam();
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  // Steps 1 and 3 overflow: +Inf in the first element of the LM head's gradient slot before its
  // backward (tests/support/inf_injector.h), in every micro-batch.
  OverlapRun runs[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    testing::InfInjector inject(nullptr);
    OverlapRunOptions o;
    o.steps = 5;
    o.nvme_dir = dir.File(overlap ? "overlap" : "serial");
    o.hooks = &inject;
    o.hook_module = [](llama::LlamaForCausalLM& m) -> nn::Module* { return &m.lm_head(); };
    o.arg = &inject;
    o.before_step = [](int step, void* arg) {
      static_cast<testing::InfInjector*>(arg)->armed = step % 2 == 1;
    };
    runs[overlap] = testing::RunOverlapCase(*comm, c, overlap == 1, o);
  }
  EXPECT_EQ(runs[0].skipped, 2);
  EXPECT_EQ(runs[1].skipped, 2);
  EXPECT_GT(runs[1].overlapped, 0);
  EXPECT_TRUE(SameBits(runs[0].masters, runs[1].masters));
  EXPECT_TRUE(SameBits({runs[0].losses}, {runs[1].losses}));
}

INSTANTIATE_TEST_SUITE_P(
    Fp16, StepOverlapOverflowTest,
    ::testing::Values(OverlapCase{2, "cpu", "none", DType::kFloat16, 0, false, 2},
                      OverlapCase{3, "cpu", "cpu", DType::kFloat16, 0, true, 2},
                      OverlapCase{3, "nvme", "none", DType::kFloat16, 1.0, false, 2},
                      // offload_param nvme: the early updates' parameters were written into the
                      // store during backward; a skipped step must put the old ones back.
                      OverlapCase{3, "cpu", "nvme", DType::kFloat16, 0, false, 2},
                      OverlapCase{3, "nvme", "nvme", DType::kFloat16, 0, false, 2}),
    [](const auto& info) { return testing::OverlapCaseName(info.param); });

// Before the embedding's backward is even enqueued (the first parameter, so the last sub-group
// to become ready), waits until the overlapped step has updated a sub-group: proof that updates
// run while backward is still going on. Fails (not hangs) after a generous time.
class WaitForEarlyUpdate final : public nn::ModuleHooks {
 public:
  const Engine* engine = nullptr;
  int64_t seen = 0;
  int waits = 0, early = 0;
  Status OnHook(nn::HookPoint point, nn::Module&, const nn::RunContext&) override {
    if (point != nn::HookPoint::kPreBackward || engine == nullptr) return Status::Ok();
    ++waits;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (engine->overlapped_sub_groups() == seen && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (engine->overlapped_sub_groups() > seen) ++early;
    seen = engine->overlapped_sub_groups();
    return Status::Ok();
  }
};

TEST(StepOverlapTest, SubGroupsAreUpdatedWhileBackwardIsStillRunning) {
  for (const char* opt : {"cpu", "nvme"}) {
    for (int stage : {2, 3}) {
      testing::ScratchDir dir;
      auto device = testing::MakeHostDevice();
      auto comm = testing::MakeLocalComm();
      auto model = testing::MakeTinyModel(device.get(), DType::kBFloat16);
      std::string zero = "\"stage\": " + std::to_string(stage) +
                         ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 1000, "
                         "\"offload_optimizer\": {\"device\": \"" +
                         opt + "\", \"pin_memory\": false, \"nvme_path\": \"" + dir.File("swap") +
                         "\"}";
      Config config = testing::MakeConfig(2, 1, zero, "\"bf16\": {\"enabled\": true},", 1, 0);
      EngineInit init;
      init.init_param = testing::TestInit(3);
      auto engine = Engine::Initialize(*model, config, *comm, *device, init);
      ASSERT_THAT(engine.status(), testing::IsOk());
      WaitForEarlyUpdate wait;
      wait.engine = engine->get();
      model->model().embed_tokens.AddHooks(&wait);
      const testing::TokenData data = testing::RandomTokens(7, 3, 2, 16, 256);
      testing::TrainAndGather(**engine, data, 3, 1);
      model->model().embed_tokens.RemoveHooksRecursive(&wait);
      EXPECT_EQ(wait.waits, 3);
      EXPECT_EQ(wait.early, 3) << opt << " stage " << stage;
      EXPECT_GT((*engine)->early_sub_groups(), 0);
      EXPECT_GT((*engine)->last_breakdown().overlapped_adam_ms, 0.0);
    }
  }
}

}  // namespace
}  // namespace strata
