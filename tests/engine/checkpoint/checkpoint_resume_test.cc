// Save at step k, load into a fresh engine, continue to n: parameters, moments and losses equal
// an uninterrupted n-step run bit for bit, for stage 0, stage 2 and the optimizer on the CPU, in
// fp32 and bf16; and the refusals: a corrupt shard, another model, another optimizer, a save
// between micro-steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::SameBits;

using ::strata::testing::IsOk;
using ::strata::testing::Placement;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kGas = 2;

class CheckpointResumeTest : public ::testing::TestWithParam<Placement> {};

TEST_P(CheckpointResumeTest, SaveLoadContinueEqualsUninterruptedBitwise) {
  const Placement p = GetParam();
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(5, 8 * kGas, 2, 16, 256);
  testing::ScratchDir dir;
  const std::string ckpt = dir.File("ckpt");
  constexpr int kSteps = 4, kAt = 2;

  // Uninterrupted.
  std::vector<float> losses_a;
  testing::EngineRun a = testing::MakeRun(*comm, p, 17);
  ASSERT_NE(a.engine, nullptr);
  const auto masters_a = testing::TrainAndGather(*a.engine, data, kSteps, kGas, &losses_a);
  ASSERT_THAT(a.engine->SaveCheckpoint(ckpt, "a"), IsOk());

  // k steps, save, a fresh engine (other initial values) loads and continues.
  {
    testing::EngineRun b = testing::MakeRun(*comm, p, 17);
    testing::TrainAndGather(*b.engine, data, kAt, kGas);
    ASSERT_THAT(b.engine->SaveCheckpoint(ckpt, "", R"({"pos": 4})"), IsOk());
  }
  testing::EngineRun c = testing::MakeRun(*comm, p, 99);
  Result<std::string> client = c.engine->LoadCheckpoint(ckpt);
  ASSERT_THAT(client.status(), IsOk());
  EXPECT_EQ(*client, R"({"pos":4})");
  EXPECT_EQ(c.engine->stats().global_steps, kAt);
  EXPECT_EQ(c.engine->stats().micro_steps, kAt * kGas);
  std::vector<float> losses_c;
  const auto masters_c =
      testing::TrainAndGather(*c.engine, data, kSteps - kAt, kGas, &losses_c, kAt * kGas);
  ASSERT_THAT(c.engine->SaveCheckpoint(ckpt, "c"), IsOk());

  EXPECT_TRUE(SameBits(masters_a, masters_c)) << PlacementName(p);
  EXPECT_EQ(a.engine->stats().loss_scale, c.engine->stats().loss_scale);
  EXPECT_EQ(a.engine->stats().skipped_steps, c.engine->stats().skipped_steps);
  EXPECT_EQ(a.engine->stats().global_steps, c.engine->stats().global_steps);
  EXPECT_TRUE(SameBits(testing::ReadAllArrays(ckpt, "a"), testing::ReadAllArrays(ckpt, "c")))
      << "moments differ: " << PlacementName(p);
  ASSERT_EQ(losses_c.size(), static_cast<size_t>((kSteps - kAt) * kGas));
  for (size_t i = 0; i < losses_c.size(); ++i) {
    EXPECT_EQ(losses_a[kAt * kGas + i], losses_c[i]) << "micro-batch " << kAt * kGas + i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, CheckpointResumeTest,
    ::testing::Values(Placement{0, "none", DType::kFloat32}, Placement{2, "none", DType::kFloat32},
                      Placement{2, "cpu", DType::kFloat32}, Placement{0, "none", DType::kBFloat16},
                      Placement{2, "none", DType::kBFloat16}, Placement{2, "cpu", DType::kBFloat16},
                      Placement{2, "cpu", DType::kFloat16}, Placement{3, "none", DType::kFloat32},
                      Placement{3, "cpu", DType::kBFloat16}),
    [](const ::testing::TestParamInfo<Placement>& i) { return PlacementName(i.param); });

// The same state whatever the placement: a stage-2 CPU-offload checkpoint continues under stage
// 0 as stage 2 would (same math, any placement). Without accumulation: stage 0 accumulates
// micro-batches inside the backward GEMMs, stage 2 after each reduce-scatter, which rounds
// differently.
TEST(CheckpointTest, LoadsAcrossPlacements) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(6, 4, 2, 16, 256);
  testing::ScratchDir dir;
  testing::EngineRun a = testing::MakeRun(*comm, {2, "cpu"}, 3, /*gas=*/1);
  testing::TrainAndGather(*a.engine, data, 2, 1);
  ASSERT_THAT(a.engine->SaveCheckpoint(dir.File("c")), IsOk());
  const auto masters_a = testing::TrainAndGather(*a.engine, data, 2, 1, nullptr, 2);
  testing::EngineRun b = testing::MakeRun(*comm, {0, "none"}, 4, /*gas=*/1);
  ASSERT_THAT(b.engine->LoadCheckpoint(dir.File("c")).status(), IsOk());
  const auto masters_b = testing::TrainAndGather(*b.engine, data, 2, 1, nullptr, 2);
  EXPECT_TRUE(SameBits(masters_a, masters_b));
}

TEST(CheckpointTest, LayoutIsDeepSpeedsLatestAndTagDirectory) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(7, kGas, 2, 16, 256);
  testing::ScratchDir dir;
  testing::EngineRun a = testing::MakeRun(*comm, {2, "none"}, 3);
  testing::TrainAndGather(*a.engine, data, 1, kGas);
  ASSERT_THAT(a.engine->SaveCheckpoint(dir.File("c")), IsOk());
  Result<std::string> latest = ReadLatestTag(dir.File("c"));
  ASSERT_THAT(latest.status(), IsOk());
  EXPECT_EQ(*latest, "global_step1");
  namespace fs = std::filesystem;
  const fs::path tag = fs::path(dir.File("c")) / "global_step1";
  EXPECT_TRUE(fs::exists(tag / "manifest.json"));
  EXPECT_TRUE(fs::exists(tag / "zero_pp_rank_0_mp_rank_00_optim_states.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(dir.File("c")) / "global_step1.partial"));
  Result<CheckpointManifest> m = ReadCheckpointManifest(tag.string());
  ASSERT_THAT(m.status(), IsOk());
  EXPECT_EQ(m->zero_stage, 2);
  EXPECT_EQ(m->global_steps, 1);
  EXPECT_EQ(m->params.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(m->optimizer, "adam");
  // Saving the same tag again replaces it and leaves no .old behind.
  ASSERT_THAT(a.engine->SaveCheckpoint(dir.File("c"), "global_step1"), IsOk());
  EXPECT_FALSE(fs::exists(fs::path(dir.File("c")) / "global_step1.old"));
}

TEST(CheckpointTest, CorruptShardIsDataLossNamingTheFile) {
  auto comm = testing::MakeLocalComm();
  testing::ScratchDir dir;
  testing::EngineRun a = testing::MakeRun(*comm, {2, "none"}, 3);
  ASSERT_THAT(a.engine->SaveCheckpoint(dir.File("c"), "t"), IsOk());
  const std::string shard =
      (std::filesystem::path(dir.File("c")) / "t" / CheckpointShardFileName(0)).string();
  {  // flip one byte of the data (the last byte of exp_avg_sq's... or master's, whichever ends)
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char ch = 0;
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x40);
    f.seekp(-100, std::ios::end);
    f.write(&ch, 1);
  }
  testing::EngineRun b = testing::MakeRun(*comm, {2, "none"}, 4);
  EXPECT_THAT(b.engine->LoadCheckpoint(dir.File("c")).status(),
              StatusIs(StatusCode::kDataLoss, HasSubstr(CheckpointShardFileName(0))));
  // Truncated: also DataLoss naming it.
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  EXPECT_THAT(b.engine->LoadCheckpoint(dir.File("c")).status(),
              StatusIs(StatusCode::kDataLoss, HasSubstr(CheckpointShardFileName(0))));
}

TEST(CheckpointTest, AnotherModelIsInvalidArgumentNamingTheFirstDifference) {
  auto comm = testing::MakeLocalComm();
  testing::ScratchDir dir;
  testing::EngineRun a = testing::MakeRun(*comm, {0, "none"}, 3);
  ASSERT_THAT(a.engine->SaveCheckpoint(dir.File("c")), IsOk());

  // Another MLP width: the first differing parameter is layer 0's gate_proj.
  auto device = testing::MakeHostDevice();
  llama::LlamaConfig lc = llama::LlamaPreset("tiny").value();
  lc.intermediate_size = 256;
  llama::LlamaModelOptions mo;
  mo.allocate_parameters = false;
  mo.allocate_grads = false;
  auto model = llama::LlamaForCausalLM::Create(lc, device.get(), mo);
  ASSERT_THAT(model.status(), IsOk());
  EngineInit init;
  init.init_param = testing::TestInit(1);
  auto e =
      Engine::Initialize(**model, testing::MakeConfig(2, 2, "\"stage\": 0"), *comm, *device, init);
  ASSERT_THAT(e.status(), IsOk());
  EXPECT_THAT(
      (*e)->LoadCheckpoint(dir.File("c")).status(),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("model.layers.0.mlp.gate_proj.weight")));

  // Tied embeddings: one parameter fewer.
  auto device2 = testing::MakeHostDevice();
  auto tied = testing::MakeTinyModel(device2.get(), DType::kFloat32, /*tied=*/true);
  auto e2 =
      Engine::Initialize(*tied, testing::MakeConfig(2, 2, "\"stage\": 0"), *comm, *device2, init);
  ASSERT_THAT(e2.status(), IsOk());
  EXPECT_THAT((*e2)->LoadCheckpoint(dir.File("c")).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("parameters")));
}

TEST(CheckpointTest, RefusesWhatItCannotDo) {
  auto comm = testing::MakeLocalComm();
  testing::ScratchDir dir;
  testing::EngineRun a = testing::MakeRun(*comm, {2, "none"}, 3);
  EXPECT_THAT(a.engine->LoadCheckpoint(dir.File("none")).status(),
              StatusIs(StatusCode::kNotFound, HasSubstr("latest")));
  EXPECT_THAT(a.engine->SaveCheckpoint(dir.File("c"), "a/b"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a/b")));
  EXPECT_THAT(a.engine->SaveCheckpoint(dir.File("c"), "t", "[1]"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("client_state")));
  // Half-way through an accumulation (gas 2, one micro-step done).
  const testing::TokenData data = testing::RandomTokens(8, 1, 2, 16, 256);
  ASSERT_THAT(a.engine->Forward(data.Batch(0)), IsOk());
  ASSERT_THAT(a.engine->Backward(), IsOk());
  ASSERT_THAT(a.engine->Step(), IsOk());
  EXPECT_THAT(a.engine->SaveCheckpoint(dir.File("c")),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("accumulation")));
}

}  // namespace
}  // namespace strata
