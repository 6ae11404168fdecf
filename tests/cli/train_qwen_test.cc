// `strata train --model DIR` on Qwen2.5 and Qwen3 directories in their real layout (config.json
// with the published field set at small sizes, BF16 safetensors with q/k/v biases or q/k norms,
// written from random weights by tests/cli/train_qwen_reference.py), three fp32 AdamW steps with
// explicit gradient_clipping, against torch.optim.AdamW on the same weights in that script
// (plain PyTorch, float64): every step's loss to 1e-4, and the weights after the last step
// (`strata export` of the saved checkpoint) to 2e-3 of each tensor's max |value|. The exported
// directory then trains again from where the run stopped (its first loss is the reference's
// loss after three steps), and its config.json is the source's but for torch_dtype.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kSeq = 24, kMicro = 2, kSteps = 3;

struct Case {
  const char* name;
  const char* family;  // the script's FAMILY
  const char* zero;    // the zero_optimization section
};

class TrainQwenTest : public ::testing::TestWithParam<Case> {};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST_P(TrainQwenTest, ThreeAdamWStepsMatchPyTorchAndTheExportLoadsBack) {
  const Case& c = GetParam();
  testing::ScratchDir dir;
  const std::string script = STRATA_QWEN_REFERENCE;
  const std::string src = dir.File("src");
  testing::CommandResult w = testing::RunCommand(std::string(kPython) + " " + script + " write " +
                                                 c.family + " " + src + " " + std::to_string(kSeq));
  if (w.exit_code != 0) {
    if (testing::RunCommand(std::string(kPython) + " -c 'import torch, numpy'").exit_code != 0) {
      GTEST_SKIP() << kPython << " cannot import torch and numpy (apt-get install python3-torch)";
    }
    FAIL() << "writing the model failed: " << w.err;
  }
  const std::string cfg = dir.File("ds.json");
  std::ofstream(cfg) << R"({
    "train_micro_batch_size_per_gpu": )"
                     << kMicro << R"(,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 2e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "zero_optimization": )"
                     << c.zero << R"(,
    "strata": {"device_memory": "256M"}
  })";
  const std::string bin = STRATA_BIN;
  const std::string common = " --config " + cfg + " --data " + src + "/tokens.bin --seq-len " +
                             std::to_string(kSeq) + " --json";
  testing::CommandResult t =
      testing::RunCommand(bin + " train --model " + src + common + " --steps " +
                          std::to_string(kSteps) + " --save " + dir.File("ckpt"));
  ASSERT_EQ(t.exit_code, 0) << t.err << t.out;
  const nlohmann::json run = nlohmann::json::parse(t.out, nullptr, false);
  ASSERT_FALSE(run.is_discarded()) << t.out;
  ASSERT_EQ(run["losses"].size(), static_cast<size_t>(kSteps)) << t.out;

  const std::string out = dir.File("exported");
  testing::CommandResult e =
      testing::RunCommand(bin + " export " + dir.File("ckpt") + " " + out + " --dtype fp32");
  ASSERT_EQ(e.exit_code, 0) << e.err << e.out;

  testing::CommandResult r =
      testing::RunCommand(std::string(kPython) + " " + script + " check " + src + " " + out + " " +
                          std::to_string(kMicro) + " " + std::to_string(kSteps) + " " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json want = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(want.is_discarded()) << r.out;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(run["losses"][s].get<double>(), want["losses"][s].get<double>(), 1e-4)
        << "step " << s << "; reference " << want.dump();
  }
  EXPECT_TRUE(want["name_mismatch"].empty()) << want.dump();
  EXPECT_LE(want["weight_rel_err"].get<double>(), 2e-3) << want.dump();
  std::printf("%s: losses %s vs PyTorch %s; grad norms %s (clipped at 0.5); weights %.2e (%s)\n",
              c.name, run["losses"].dump().c_str(), want["losses"].dump().c_str(),
              want["grad_norms"].dump().c_str(), want["weight_rel_err"].get<double>(),
              want["worst_tensor"].get<std::string>().c_str());

  // The export's config.json: the source's, but for torch_dtype (what was written).
  nlohmann::json source = ReadJson(src + "/config.json"), exported = ReadJson(out + "/config.json");
  ASSERT_FALSE(exported.is_discarded());
  EXPECT_EQ(exported["torch_dtype"], "float32");
  source.erase("torch_dtype");
  exported.erase("torch_dtype");
  EXPECT_EQ(exported, source);
  EXPECT_TRUE(std::filesystem::exists(out + "/generation_config.json"));

  // It loads back: one more step from the exported weights starts at the reference's loss after
  // the three steps.
  testing::CommandResult again =
      testing::RunCommand(bin + " train --model " + out + common + " --steps 1");
  ASSERT_EQ(again.exit_code, 0) << again.err << again.out;
  const nlohmann::json more = nlohmann::json::parse(again.out, nullptr, false);
  ASSERT_FALSE(more.is_discarded()) << again.out;
  EXPECT_NEAR(more["losses"][0].get<double>(), want["final_loss"].get<double>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Families, TrainQwenTest,
    ::testing::Values(Case{"qwen25_zero3_offload", "qwen2.5",
                           R"({"stage": 3, "offload_optimizer": {"device": "cpu"},
                 "offload_param": {"device": "cpu"}})"},
                      Case{"qwen3_zero2", "qwen3", R"({"stage": 2})"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
