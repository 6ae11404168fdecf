// `strata generate` run as a user runs it: the built binary on a checkpoint `strata train --save`
// wrote (tiny preset, 2 steps) and on its export, its --json output parsed, and its errors and
// their advice checked (each piece of advice followed once).
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Bin() { return std::string(STRATA_BIN); }

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScratchDir();
    const std::string cfg = dir_->File("zero2.json");
    std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
      "zero_optimization": {"stage": 2}, "strata": {"device_memory": "256M"}})";
    const auto r = testing::RunCommand(Bin() + " train --config " + cfg +
                                       " --init tiny --steps 2 --seq-len 32 --save " +
                                       dir_->File("ckpt") + " --export " + dir_->File("hf"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static nlohmann::json Json(const std::string& args) {
    const auto r = testing::RunCommand(Bin() + " generate " + args + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  }
  static testing::ScratchDir* dir_;
};
testing::ScratchDir* GenerateCliTest::dir_ = nullptr;

TEST_F(GenerateCliTest, CheckpointAndItsExportGenerateTheSameGreedyTokens) {
  const auto a = Json("--model " + dir_->File("ckpt") + " --prompt 'ROMEO:' --max-new-tokens 8");
  const auto b = Json("--model " + dir_->File("hf") + " --prompt 'ROMEO:' --max-new-tokens 8");
  ASSERT_TRUE(a.contains("results"));
  ASSERT_TRUE(b.contains("results"));
  EXPECT_EQ(a["results"][0]["tokens"], b["results"][0]["tokens"]);
  EXPECT_EQ(a["results"][0]["tokens"].size(), 8u);
  EXPECT_EQ(a["results"][0]["finish_reason"], "length");
  EXPECT_THAT(a["model"].get<std::string>(), HasSubstr("checkpoint"));
  EXPECT_GT(a["kv_cache"]["cache_bytes"].get<uint64_t>(), 0u);
}

TEST_F(GenerateCliTest, TextIsThePromptThenTheContinuation) {
  const auto j = Json("--model " + dir_->File("hf") + " --prompt 'To be' --max-new-tokens 6");
  ASSERT_TRUE(j.contains("results"));
  const auto r = testing::RunCommand(Bin() + " generate --model " + dir_->File("hf") +
                                     " --prompt 'To be' --max-new-tokens 6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "To be" + j["results"][0]["text"].get<std::string>() + "\n");
  EXPECT_THAT(r.err, HasSubstr("KV cache"));
}

TEST_F(GenerateCliTest, StopsAtAStopIdAndSamplesReproducibly) {
  const auto g = Json("--model " + dir_->File("hf") + " --prompt 'ab' --max-new-tokens 4");
  ASSERT_TRUE(g.contains("results"));
  const int first = g["results"][0]["tokens"][0].get<int>();
  const auto s = Json("--model " + dir_->File("hf") + " --prompt 'ab' --max-new-tokens 4 " +
                      "--stop-id " + std::to_string(first));
  ASSERT_TRUE(s.contains("results"));
  EXPECT_EQ(s["results"][0]["tokens"], nlohmann::json::array({first}));
  EXPECT_EQ(s["results"][0]["finish_reason"], "stop");
  const std::string sample = "--model " + dir_->File("hf") +
                             " --prompt 'ab' --prompt 'xyz' --max-new-tokens 6 --temperature 1.2 "
                             "--top-k 50 --top-p 0.9 --seed 7";
  EXPECT_EQ(Json(sample)["results"], Json(sample)["results"]);
}

// Well-formed UTF-8 (RFC 3629: no overlongs, surrogates or code points past U+10FFFF).
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1f) : n == 3 ? (b & 0x0f) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    const uint32_t min = n == 1 ? 0 : n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

// The tiny model's byte vocabulary samples bytes that are not UTF-8 on their own: what is printed
// (streamed, and in --json) is valid text, each invalid byte run one U+FFFD.
TEST_F(GenerateCliTest, SampledBytesPrintAsValidUtf8) {
  const std::string args = "--model " + dir_->File("hf") +
                           " --prompt 'ROMEO:' --max-new-tokens 120 --temperature 3 --seed 11";
  const auto j = Json(args);
  ASSERT_TRUE(j.contains("results"));
  int high = 0;
  for (const auto& t : j["results"][0]["tokens"]) high += t.get<int>() >= 128 ? 1 : 0;
  ASSERT_GT(high, 0) << "the sample has no byte >= 128: choose another seed";
  const std::string text = j["results"][0]["text"].get<std::string>();
  EXPECT_TRUE(ValidUtf8(text));
  EXPECT_THAT(text, HasSubstr("\xEF\xBF\xBD"));
  const auto r = testing::RunCommand(Bin() + " generate " + args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ValidUtf8(r.out));
  EXPECT_EQ(r.out, "ROMEO:" + text + "\n");
}

TEST_F(GenerateCliTest, NvmePlacementGivesTheSameGreedyTokensAsTheDevice) {
  const std::string cfg = dir_->File("nvme.json");
  std::ofstream(cfg) << R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 1000,
      "offload_param": {"device": "nvme", "nvme_path": ")"
                     << dir_->File("swap") << R"(", "max_in_cpu": 0, "buffer_size": 1e6}}})";
  const auto d = Json("--model " + dir_->File("hf") + " --prompt 'ROMEO:' --max-new-tokens 8");
  const auto n = Json("--model " + dir_->File("hf") + " --config " + cfg +
                      " --prompt 'ROMEO:' --max-new-tokens 8");
  ASSERT_TRUE(n.contains("results"));
  EXPECT_EQ(n["results"][0]["tokens"], d["results"][0]["tokens"]);
  EXPECT_THAT(n["weights"].get<std::string>(), HasSubstr("on NVMe"));
}

TEST_F(GenerateCliTest, EstimateInferenceCountsWeightsAndTheKvCachePerTier) {
  // Norms (numel = hidden) persistent, everything else streamed; nothing kept in CPU memory.
  const std::string cfg = dir_->File("estimate.json");
  std::ofstream(cfg) << R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 1000,
      "offload_param": {"device": "nvme", "nvme_path": "/tmp", "max_in_cpu": 0}}})";
  const auto r = testing::RunCommand(Bin() + " estimate --inference --model " + dir_->File("hf") +
                                     " --batch 3 --max-len 100 --config " + cfg + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  nlohmann::json c;
  std::ifstream(dir_->File("hf") + "/config.json") >> c;
  const int64_t h = c["hidden_size"], layers = c["num_hidden_layers"], v = c["vocab_size"];
  const int64_t i = c["intermediate_size"];
  const int64_t kv =
      c["num_key_value_heads"].get<int64_t>() * h / c["num_attention_heads"].get<int64_t>();
  const int64_t params = v * h * (c["tie_word_embeddings"].get<bool>() ? 1 : 2) + h +
                         layers * (2 * h * h + 2 * kv * h + 3 * h * i + 2 * h);
  const int64_t streamed_bytes = (params - (2 * layers + 1) * h) * 4;  // fp32
  EXPECT_EQ(j["params"].get<int64_t>(), params);
  EXPECT_EQ(j["weight_bytes"].get<int64_t>(), params * 4);
  EXPECT_EQ(j["kv_cache_bytes"].get<int64_t>(), 2 * layers * 3 * 100 * kv * 4);
  const int64_t act = j["kv_cache_bytes"].get<int64_t>() + j["workspace_bytes"].get<int64_t>();
  const auto& p = j["placements"];
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0]["device_bytes"].get<int64_t>(), params * 4 + act);
  EXPECT_EQ(p[0]["h2d_bytes_per_forward"].get<int64_t>(), 0);
  EXPECT_EQ(p[1]["pinned_cpu_bytes"].get<int64_t>(), streamed_bytes);
  EXPECT_EQ(p[1]["h2d_bytes_per_forward"].get<int64_t>(), streamed_bytes);
  EXPECT_EQ(p[2]["nvme_bytes"].get<int64_t>(), streamed_bytes);
  EXPECT_EQ(p[2]["nvme_read_bytes_per_forward"].get<int64_t>(), streamed_bytes);
}

TEST_F(GenerateCliTest, EstimateInferenceCountsMistralsRollingCache) {
  // Mistral-7B-v0.1: 32 layers, 8 kv heads of 128, sliding_window 4096. Past the window the cache
  // keeps 2 * 4096 - 1 positions (the window and one prefill chunk), within it max_len.
  const auto rolling = testing::RunCommand(
      Bin() + " estimate --inference --preset mistral-7b --max-len 10000 --batch 2 --json");
  ASSERT_EQ(rolling.exit_code, 0) << rolling.err;
  const auto j = nlohmann::json::parse(rolling.out);
  EXPECT_EQ(j["kv_cache_rows"].get<int64_t>(), 8191);
  EXPECT_EQ(j["kv_cache_bytes"].get<int64_t>(), int64_t{2} * 32 * 2 * 8191 * 8 * 128 * 4);
  const auto within = testing::RunCommand(
      Bin() + " estimate --inference --preset mistral-7b --max-len 3000 --batch 2 --json");
  ASSERT_EQ(within.exit_code, 0) << within.err;
  const auto w = nlohmann::json::parse(within.out);
  EXPECT_EQ(w["kv_cache_rows"].get<int64_t>(), 3000);
  EXPECT_EQ(w["kv_cache_bytes"].get<int64_t>(), int64_t{2} * 32 * 2 * 3000 * 8 * 128 * 4);
}

TEST_F(GenerateCliTest, BadInputIsRefusedWithAdvice) {
  auto gen = [](const std::string& args) {
    return testing::RunCommand(Bin() + " generate " + args);
  };
  auto r = gen("--prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--model DIR is required"));
  r = gen("--model " + dir_->File("nowhere") + " --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("neither a Hugging Face directory"));
  r = gen("--model " + dir_->File("hf") + " --prompt hi --top-p 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--top-p must be in (0, 1]"));
  r = gen("--model " + dir_->File("hf") + " --prompt hi --stop-id 999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("outside the vocabulary"));
  // tiny's max_position_embeddings is 256: the advice (lower --max-new-tokens) then works.
  r = gen("--model " + dir_->File("hf") + " --prompt hi --max-new-tokens 300");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("lower --max-new-tokens"));
  EXPECT_THAT(r.err, HasSubstr("exceeds the model's max_position_embeddings 256 (only "
                               "rope_scaling.rope_type \"dynamic\" goes past it"));
  EXPECT_EQ(gen("--model " + dir_->File("hf") + " --prompt hi --max-new-tokens 20").exit_code, 0);
  // Weights that do not fit the device: the advice (offload them) then works.
  const std::string small = dir_->File("small.json");
  std::ofstream(small) << R"({"train_batch_size": 1, "strata": {"device_memory": "2M"}})";
  r = gen("--model " + dir_->File("hf") + " --config " + small + " --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("offload the weights: zero_optimization.stage 3 with offload_param"));
  const std::string offl = dir_->File("offload.json");
  std::ofstream(offl) << R"({"train_batch_size": 1, "strata": {"device_memory": "2M"},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
        "stage3_param_persistence_threshold": 1000, "stage3_max_live_parameters": 100000,
        "stage3_prefetch_bucket_size": 50000}})";
  r = gen("--model " + dir_->File("hf") + " --config " + offl + " --prompt hi --max-new-tokens 4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("hi"));
  // With the weights offloaded, a KV cache too large for the device: its advice then works.
  r = gen("--model " + dir_->File("hf") + " --config " + offl +
          " --prompt hi --max-new-tokens 250");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("lower --max-new-tokens"));
}

}  // namespace
}  // namespace strata
