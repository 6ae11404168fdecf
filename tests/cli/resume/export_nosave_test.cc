// --export without --save: the weights consolidated from the engine's state (the NVMe-resident
// master streamed one parameter at a time) are byte for byte the export of the same run's saved
// checkpoint (strata export's path, from the shard files), and no checkpoint is written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/resume/child_process.h"
#include "tests/cli/resume/nvme_run.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(ExportNoSaveTest, ExportFromTheEngineEqualsTheExportOfTheSavedCheckpoint) {
  testing::ScratchDir dir;
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  const std::string base = std::string(STRATA_BIN) + " train --config " + cfg +
                           " --init tiny --seq-len 32 --seed 5 --steps 3 ";
  testing::ChildProcess saved(
      testing::Words(base + "--save " + dir.File("ckpt") + " --export " + dir.File("from_ckpt")),
      dir.File("1.out"), dir.File("1.err"));
  ASSERT_EQ(saved.Wait(), 0) << testing::ReadText(dir.File("1.err"));
  testing::ChildProcess direct(testing::Words(base + "--export " + dir.File("from_engine")),
                               dir.File("2.out"), dir.File("2.err"));
  ASSERT_EQ(direct.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  EXPECT_THAT(testing::ReadText(dir.File("2.out")),
              HasSubstr("exported the trained weights (step 3, 0.85M params) to " +
                        dir.File("from_engine") + " as bf16: model.safetensors"));

  const std::string a = testing::ReadText(dir.File("from_ckpt") + "/model.safetensors");
  const std::string b = testing::ReadText(dir.File("from_engine") + "/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the two exports differ";
  const auto ca = nlohmann::json::parse(testing::ReadText(dir.File("from_ckpt") + "/config.json"));
  const auto cb =
      nlohmann::json::parse(testing::ReadText(dir.File("from_engine") + "/config.json"));
  // The run's dtype (bf16 here), as strata export of its checkpoint writes.
  EXPECT_EQ(ca["torch_dtype"], "bfloat16");
  EXPECT_EQ(cb["torch_dtype"], "bfloat16");
  EXPECT_EQ(ca["hidden_size"], cb["hidden_size"]);
  EXPECT_EQ(ca["num_hidden_layers"], cb["num_hidden_layers"]);
  EXPECT_EQ(ca["vocab_size"], cb["vocab_size"]);
  // Nothing but the export: no checkpoint directory anywhere in the scratch space but --save's.
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(fs::exists(e.path() / "latest") && e.path().filename() != "ckpt") << e.path();
  }
}

}  // namespace
}  // namespace strata
