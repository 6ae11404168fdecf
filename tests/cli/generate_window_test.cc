// `strata generate` on a Mistral directory as a user runs it, past the model's sliding window:
// tests/cli/torch_train_reference.py writes a MistralForCausalLM directory (random fp32 weights,
// sliding_window 8), the built binary generates 12 greedy tokens after a 17-byte prompt (the
// rolling KV cache of 2W - 1 = 15 rows wraps), with the weights on the device and streamed from
// NVMe (offload_param nvme, max_in_cpu 0), and tests/models/torch_llama_generate_reference.py
// decodes the same prompt in float64 PyTorch WITHOUT a cache (every step recomputes the whole
// sequence under the window's mask). Asserted: the greedy tokens are the reference's, and the
// window matters (the reference without it continues differently).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kSeqLen = 32;  // the writer's window is a quarter of it: 8
constexpr int kNewTokens = 12;
constexpr const char* kPrompt = "ROMEO: what light";

std::string Source(const std::string& rel) { return std::string(STRATA_SOURCE_DIR) + "/" + rel; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The F64 tensor `name` of a safetensors file, as int64 (the reference's greedy tokens).
std::vector<int64_t> ReadTokens(const std::string& path, const std::string& name) {
  const std::string bytes = ReadText(path);
  if (bytes.size() < 8) return {};
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  if (!header.contains(name)) return {};
  const auto& info = header[name];
  const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
  std::vector<double> v((end - begin) / 8);
  std::memcpy(v.data(), bytes.data() + 8 + n + begin, end - begin);
  return std::vector<int64_t>(v.begin(), v.end());
}

// The reference's greedy tokens after kPrompt (kNewTokens of them) for the model in `model`.
std::vector<int64_t> ReferenceTokens(const testing::ScratchDir& dir, const std::string& model,
                                     const std::string& tag) {
  nlohmann::json in;
  std::vector<int> ids;
  for (unsigned char c : std::string(kPrompt)) ids.push_back(c);
  in["prompts"] = {ids};
  in["steps"] = kNewTokens;
  in["cache"] = false;
  const std::string in_path = dir.File(tag + ".json"), out = dir.File(tag + ".safetensors");
  std::ofstream(in_path) << in.dump();
  const auto r = testing::RunCommand(std::string(kPython) + " " +
                                     Source("tests/models/torch_llama_generate_reference.py") +
                                     " " + model + " " + in_path + " " + out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> t = ReadTokens(out, "tokens.0");
  if (t.size() > static_cast<size_t>(kNewTokens)) t.resize(kNewTokens);
  return t;
}

std::vector<int64_t> Generated(const std::string& model, const std::string& config) {
  const auto r =
      testing::RunCommand(std::string(STRATA_BIN) + " generate --model " + model +
                          (config.empty() ? "" : " --config " + config) + " --prompt '" + kPrompt +
                          "' --max-new-tokens " + std::to_string(kNewTokens) + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["results"][0]["prompt_tokens"].get<size_t>(), std::strlen(kPrompt));
  return j["results"][0]["tokens"].get<std::vector<int64_t>>();
}

TEST(GenerateWindowCliTest, MistralPastItsWindowMatchesAnUncachedPyTorchDecode) {
  if (std::system((std::string(kPython) + " -c 'import torch, numpy' >/dev/null 2>&1").c_str()) !=
      0) {
    GTEST_SKIP() << kPython << " cannot import torch and numpy (apt-get install python3-torch)";
  }
  testing::ScratchDir dir;
  const std::string model = dir.File("model");
  const auto w = testing::RunCommand("STRATA_MODELS_TESTS=" + Source("tests/models") + " " +
                                     kPython + " " + Source("tests/cli/torch_train_reference.py") +
                                     " write mistral " + model + " " + std::to_string(kSeqLen));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const nlohmann::json cfg = nlohmann::json::parse(ReadText(model + "/config.json"));
  ASSERT_EQ(cfg["architectures"][0], "MistralForCausalLM");
  const int window = cfg["sliding_window"].get<int>();
  ASSERT_LT(window, static_cast<int>(std::strlen(kPrompt)));  // the prompt alone passes it
  ASSERT_LT(2 * window - 1, static_cast<int>(std::strlen(kPrompt)) + kNewTokens);  // wraps

  const std::vector<int64_t> want = ReferenceTokens(dir, model, "windowed");
  ASSERT_EQ(want.size(), static_cast<size_t>(kNewTokens));

  // Weights on the device (no --config), then streamed from NVMe. The read buffers hold the
  // largest parameter (DeepSpeed's default 1e8 elements page-locks 2 GB for this 0.1M model).
  EXPECT_EQ(Generated(model, ""), want) << "weights on the device";
  const int64_t hidden = cfg["hidden_size"].get<int64_t>();
  const int64_t largest =
      hidden * std::max(cfg["vocab_size"].get<int64_t>(), cfg["intermediate_size"].get<int64_t>());
  const std::string nvme = dir.File("nvme.json");
  std::ofstream(nvme) << R"({"train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": ")"
                      << dir.File("swap") << R"(", "max_in_cpu": 0, "buffer_size": )" << largest
                      << R"(}},
    "strata": {"device_memory": "256M"}})";
  std::filesystem::create_directories(dir.File("swap"));
  EXPECT_EQ(Generated(model, nvme), want) << "weights on NVMe";

  // The window matters: without it the same weights continue differently.
  const std::string open = dir.File("open");
  std::filesystem::create_directories(open);
  nlohmann::json open_cfg = cfg;
  open_cfg.erase("sliding_window");
  std::ofstream(open + "/config.json") << open_cfg.dump(2);
  std::filesystem::copy_file(model + "/model.safetensors", open + "/model.safetensors");
  EXPECT_NE(ReferenceTokens(dir, open, "open"), want);
}

}  // namespace
}  // namespace strata
