// `strata train` run as a user runs it: the built binary on the `tiny` preset with a config
// written to a scratch directory, its --json output parsed, and its errors checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// ZeRO-2 with the optimizer on the CPU, fp32, micro batch 4, a learning rate that makes 5 steps
// of byte-level text lower the loss reliably.
constexpr const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "strata": {"device_memory": "256M"}
})";

std::string WriteFile(const testing::ScratchDir& dir, const std::string& name,
                      const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path) << text;
  return path;
}

std::string Train(const std::string& args) { return std::string(STRATA_BIN) + " train " + args; }

// A Hugging Face directory with tiny's shape, every weight 0 and every norm 1 (safetensors
// written by hand: 8-byte header length, JSON header, F32 data). Its logits are all 0, so the
// first loss is exactly ln(vocab).
void WriteZeroCheckpoint(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const int64_t h = 128, kv = 64, ffn = 384, vocab = 256, layers = 4;
  std::ofstream(dir / "config.json") << nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                                                       {"model_type", "llama"},
                                                       {"vocab_size", vocab},
                                                       {"hidden_size", h},
                                                       {"intermediate_size", ffn},
                                                       {"num_hidden_layers", layers},
                                                       {"num_attention_heads", 4},
                                                       {"num_key_value_heads", 2},
                                                       {"max_position_embeddings", 256},
                                                       {"rms_norm_eps", 1e-5},
                                                       {"tie_word_embeddings", false},
                                                       {"torch_dtype", "float32"}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {vocab, h}},
      {"model.norm.weight", {h}},
      {"lm_head.weight", {vocab, h}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"self_attn.q_proj.weight", {h, h}},
             {"self_attn.k_proj.weight", {kv, h}},
             {"self_attn.v_proj.weight", {kv, h}},
             {"self_attn.o_proj.weight", {h, h}},
             {"mlp.gate_proj.weight", {ffn, h}},
             {"mlp.up_proj.weight", {ffn, h}},
             {"mlp.down_proj.weight", {h, ffn}},
             {"input_layernorm.weight", {h}},
             {"post_attention_layernorm.weight", {h}}}) {
      tensors.push_back({p + name, shape});
    }
  }
  nlohmann::json header;
  std::vector<float> data;
  for (const auto& [name, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const uint64_t begin = data.size() * sizeof(float);
    data.resize(data.size() + static_cast<size_t>(n), name.ends_with("norm.weight") ? 1.0f : 0.0f);
    header[name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size() * sizeof(float)}}};
  }
  const std::string text = header.dump();
  const uint64_t len = text.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), sizeof(len));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
}

TEST(StrataTrainTest, TinyZero2CpuOffloadLowersTheLossOverFiveSteps) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  testing::CommandResult r = testing::RunCommand(
      Train("--config " + cfg + " --init tiny --steps 5 --seq-len 32 --seed 3 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["losses"].size(), 5u) << r.out;
  for (const auto& l : j["losses"]) {
    EXPECT_TRUE(std::isfinite(l.get<double>())) << r.out;
  }
  // Random init over a 256-byte vocabulary starts near ln(256).
  EXPECT_NEAR(j["losses"][0].get<double>(), std::log(256.0), 0.5) << r.out;
  EXPECT_LT(j["losses"][4].get<double>(), j["losses"][0].get<double>()) << r.out;
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["skipped_steps"], 0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["peak_bytes"]["device"].get<uint64_t>(), 0u);
  EXPECT_GT(j["peak_bytes"]["cpu"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["config"]["stage"], 2);
  EXPECT_EQ(j["config"]["offload_optimizer"], "cpu");
  EXPECT_EQ(j["config"]["dtype"], "fp32");
}

TEST(StrataTrainTest, SameSeedGivesTheSameLosses) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  const std::string cmd =
      Train("--deepspeed_config " + cfg + " --init tiny --steps 2 --seq-len 16 --json");
  testing::CommandResult a = testing::RunCommand(cmd);
  testing::CommandResult b = testing::RunCommand(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["losses"], nlohmann::json::parse(b.out)["losses"]);
}

TEST(StrataTrainTest, ModelDirectoryIsLoadedByName) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  WriteZeroCheckpoint(dir.path() / "hf");
  testing::CommandResult r = testing::RunCommand(
      Train("--config " + cfg + " --model " + dir.File("hf") + " --steps 2 --seq-len 16 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["losses"].size(), 2u);
  EXPECT_NEAR(j["losses"][0].get<double>(), std::log(256.0), 1e-4) << r.out;
}

TEST(StrataTrainTest, ConfigErrorNamesTheKeyAndExits2) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(
      dir, "bad.json",
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2, "stagee": 1}})");
  testing::CommandResult r = testing::RunCommand(Train("--config " + cfg + " --init tiny"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("strata train: "));
  EXPECT_THAT(r.err, HasSubstr("zero_optimization.stagee"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(StrataTrainTest, BadPresetNamesTheAllowedPresets) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  testing::CommandResult r = testing::RunCommand(Train("--config " + cfg + " --init huge"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("huge"));
  EXPECT_THAT(r.err, HasSubstr("tiny, small, 1b, 7b"));
}

TEST(StrataTrainTest, UsageErrorsExit2) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  testing::CommandResult none = testing::RunCommand(Train("--config " + cfg));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("--init PRESET"));
  testing::CommandResult no_config = testing::RunCommand(Train("--init tiny"));
  EXPECT_EQ(no_config.exit_code, 2);
  EXPECT_THAT(no_config.err, HasSubstr("--config"));
}

TEST(StrataTrainTest, TokenIdsBeyondTheVocabularyNameBoth) {
  testing::ScratchDir dir;
  const std::string cfg = WriteFile(dir, "ds.json", kConfig);
  // Raw uint16 ids (nanoGPT layout), all 1000: beyond tiny's 256-entry vocabulary.
  std::string bin;
  for (int i = 0; i < 4096; ++i) bin += std::string("\xe8\x03", 2);
  const std::string data = WriteFile(dir, "tokens.bin", bin);
  testing::CommandResult r = testing::RunCommand(
      Train("--config " + cfg + " --init tiny --steps 1 --seq-len 16 --data " + data));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("1000"));
  EXPECT_THAT(r.err, HasSubstr("256"));
}

}  // namespace
}  // namespace strata
