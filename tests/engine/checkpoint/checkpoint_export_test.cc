// Export (zero_to_fp32): a checkpoint consolidated into a Hugging Face directory loads into a
// fresh model (models/llama's loader) that computes the same logits as the engine's model —
// bitwise in fp32 — and the same as rounding the masters once in bf16; sharded above a size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/half.h"
#include "models/llama/llama_checkpoint.h"
#include "nn/io/safetensors.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

std::vector<float> Logits(nn::CausalLM& model, Device& device, const nn::TokenBatch& batch) {
  Result<Stream> s = device.CreateStream();
  EXPECT_THAT(s.status(), IsOk());
  nn::RunContext ctx{&device, *s, false};
  EXPECT_THAT(model.Forward(ctx, batch), IsOk());
  EXPECT_THAT(s->Synchronize(), IsOk());
  const nn::Tensor t = model.logits();
  std::vector<float> out(static_cast<size_t>(t.shape.numel()));
  std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  EXPECT_THAT(device.DestroyStream(*s), IsOk());
  return out;
}

// Trains 2 steps, saves to <dir>/c with the model's config.json beside it.
void TrainAndSave(const std::string& dir, testing::EngineRun* run, const testing::TokenData& data) {
  auto comm = testing::MakeLocalComm();
  *run = testing::MakeRun(*comm, {2, "cpu"}, 5);
  testing::TrainAndGather(*run->engine, data, 2, 2);
  ASSERT_THAT(run->engine->SaveCheckpoint(dir), IsOk());
  std::ofstream(fs::path(dir) / "config.json")
      << llama::LlamaConfigJson(llama::LlamaPreset("tiny").value()).dump(2);
}

TEST(CheckpointExportTest, ExportedModelGivesTheEnginesLogitsBitwise) {
  testing::ScratchDir dir;
  const testing::TokenData data = testing::RandomTokens(9, 5, 2, 16, 256);
  testing::EngineRun run;
  TrainAndSave(dir.File("c"), &run, data);
  ASSERT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), {}), IsOk());
  EXPECT_TRUE(fs::exists(fs::path(dir.File("hf")) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir.File("hf")) / "config.json"));

  auto device = testing::MakeHostDevice();
  auto loaded = llama::LoadLlamaForCausalLM(dir.File("hf"), device.get());
  ASSERT_THAT(loaded.status(), IsOk());
  const nn::TokenBatch batch = data.Batch(4);
  const std::vector<float> got = Logits(**loaded, *device, batch);
  const std::vector<float> want = Logits(*run.model, *run.device, batch);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST(CheckpointExportTest, Bf16ExportIsTheMastersRoundedOnceAndShardsAboveTheLimit) {
  testing::ScratchDir dir;
  const testing::TokenData data = testing::RandomTokens(10, 4, 2, 16, 256);
  testing::EngineRun run;
  TrainAndSave(dir.File("c"), &run, data);
  CheckpointExportOptions o;
  o.dtype = DType::kBFloat16;
  o.max_shard_bytes = 256 << 10;  // tiny's ~1M params in bf16 make several shards
  ASSERT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), o), IsOk());
  EXPECT_TRUE(fs::exists(fs::path(dir.File("hf")) / "model.safetensors.index.json"));

  auto ckpt = nn::SafetensorsCheckpoint::Open(dir.File("hf"));
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_GT(ckpt->num_files(), 1u);
  std::vector<float> master(run.engine->layout().slices()[1].numel);
  ASSERT_THAT(run.engine->GatherMasterParameter(1, master), IsOk());
  auto t = ckpt->Tensor(run.model->NamedParameters()[1]->name());
  ASSERT_THAT(t.status(), IsOk());
  ASSERT_EQ(t->dtype, DType::kBFloat16);
  for (size_t k = 0; k < master.size(); ++k) {
    uint16_t h = 0;
    std::memcpy(&h, t->data.data() + 2 * k, 2);
    ASSERT_EQ(h, FloatToBf16(master[k])) << k;
  }
  // And it loads back.
  auto device = testing::MakeHostDevice();
  EXPECT_THAT(llama::LoadLlamaForCausalLM(dir.File("hf"), device.get()).status(), IsOk());
}

TEST(CheckpointExportTest, RefusesWithoutAConfigOrWithACorruptShard) {
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  testing::EngineRun run = testing::MakeRun(*comm, {0, "none"}, 5);
  ASSERT_THAT(run.engine->SaveCheckpoint(dir.File("c"), "t"), IsOk());
  EXPECT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), {}),
              StatusIs(StatusCode::kNotFound, HasSubstr("config.json")));
  std::ofstream(fs::path(dir.File("c")) / "config.json")
      << llama::LlamaConfigJson(llama::LlamaPreset("tiny").value()).dump(2);
  const fs::path shard = fs::path(dir.File("c")) / "t" / CheckpointShardFileName(0);
  fs::resize_file(shard, fs::file_size(shard) - 4);
  EXPECT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), {}),
              StatusIs(StatusCode::kDataLoss, HasSubstr(CheckpointShardFileName(0))));
  EXPECT_FALSE(fs::exists(fs::path(dir.File("hf")) / "model.safetensors"));
}

// A source dtype Strata does not write is refused, naming the field and the way out (--dtype);
// with a dtype chosen the export runs.
TEST(CheckpointExportTest, UnwritableSourceDtypeNeedsAnExplicitOne) {
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  testing::EngineRun run = testing::MakeRun(*comm, {0, "none"}, 5);
  ASSERT_THAT(run.engine->SaveCheckpoint(dir.File("c"), "t"), IsOk());
  nlohmann::json c = llama::LlamaConfigJson(llama::LlamaPreset("tiny").value());
  c["torch_dtype"] = "float8_e4m3fn";
  std::ofstream(fs::path(dir.File("c")) / "config.json") << c.dump(2);
  EXPECT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), {}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("torch_dtype = \"float8_e4m3fn\" is not one Strata writes "
                                 "(float32, bfloat16, float16); choose one with --dtype")));
  CheckpointExportOptions o;
  o.dtype = DType::kBFloat16;
  DType written = DType::kFloat32;
  ASSERT_THAT(ExportCheckpoint(dir.File("c"), dir.File("hf"), o, &written), IsOk());
  EXPECT_EQ(written, DType::kBFloat16);
  std::ifstream in(fs::path(dir.File("hf")) / "config.json");
  EXPECT_EQ(nlohmann::json::parse(in)["torch_dtype"], "bfloat16");
}

}  // namespace
}  // namespace strata
