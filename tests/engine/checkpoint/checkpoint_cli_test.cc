// strata train --save / --save-interval / --load auto / --export and strata export, run as a
// user runs them: a resumed run's losses continue the uninterrupted run's exactly, and the
// exported directory trains again with --model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "strata": {"device_memory": "256M"}
})";

std::string Strata(const std::string& args) { return std::string(STRATA_BIN) + " " + args; }

std::vector<double> Losses(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The JSON object is the last line (checkpoint lines may come before it).
  const size_t at = r.out.rfind("\n{");
  const std::string last = at == std::string::npos ? r.out : r.out.substr(at + 1);
  nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? std::vector<double>{} : j["losses"].get<std::vector<double>>();
}

TEST(CheckpointCliTest, SaveResumeExportAndTrainTheExport) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << kConfig;
  const std::string ckpt = dir.File("ckpt"), hf = dir.File("hf");
  const std::string base = "train --config " + cfg + " --init tiny --seq-len 32 --steps 4 --json ";

  // Uninterrupted, saving at steps 2 and 4, exporting at the end.
  const std::vector<double> all = Losses(
      testing::RunCommand(Strata(base + "--save " + ckpt + " --save-interval 2 --export " + hf)));
  ASSERT_EQ(all.size(), 4u);
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "global_step2" / "manifest.json"));
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "global_step4" / "manifest.json"));
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "config.json"));
  EXPECT_TRUE(fs::exists(fs::path(hf) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(hf) / "config.json"));

  // As if the run had died after step 2: `latest` names global_step2; --load auto resumes there
  // and the losses of steps 3-4 are the uninterrupted run's, exactly.
  std::ofstream(fs::path(ckpt) / "latest") << "global_step2\n";
  const std::vector<double> resumed =
      Losses(testing::RunCommand(Strata(base + "--save " + ckpt + " --load auto")));
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0], all[2]);
  EXPECT_EQ(resumed[1], all[3]);

  // --load auto with nothing saved yet starts fresh and says so.
  const testing::CommandResult fresh = testing::RunCommand(
      Strata("train --config " + cfg + " --init tiny --seq-len 32 --steps 1 --save " +
             dir.File("empty") + " --load auto"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_THAT(fresh.out, HasSubstr("starting fresh"));
  EXPECT_THAT(fresh.out, HasSubstr("checkpoint: saved global_step1"));

  // strata export, bf16, then training from the export.
  const testing::CommandResult ex =
      testing::RunCommand(Strata("export " + ckpt + " " + dir.File("hf16") + " --dtype bf16"));
  EXPECT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_THAT(ex.out, HasSubstr("exported global_step4"));
  const std::vector<double> again =
      Losses(testing::RunCommand(Strata("train --config " + cfg + " --model " + dir.File("hf16") +
                                        " --seq-len 32 --steps 1 --json")));
  EXPECT_EQ(again.size(), 1u);
}

TEST(CheckpointCliTest, ErrorsAreOneLineAndExitTwo) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << kConfig;
  testing::CommandResult r =
      testing::RunCommand(Strata("export " + dir.File("nothing") + " " + dir.File("out")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("latest"));
  r = testing::RunCommand(Strata("export " + dir.File("nothing")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("CKPT_DIR OUT_DIR"));
  r = testing::RunCommand(
      Strata("train --config " + cfg + " --init tiny --steps 1 --load " + dir.File("none")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("latest"));
}

}  // namespace
}  // namespace strata
