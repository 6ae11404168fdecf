// --save-total-limit N keeps the newest N complete checkpoints, never removing the one the run
// resumed from nor the one `latest` names; it needs --save.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli/resume/child_process.h"
#include "tests/cli/resume/nvme_run.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<std::string> Tags(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int Train(const std::string& args, const testing::ScratchDir& dir, const std::string& name) {
  testing::ChildProcess p(testing::Words(std::string(STRATA_BIN) + " train " + args),
                          dir.File(name + ".out"), dir.File(name + ".err"));
  const int code = p.Wait();
  EXPECT_EQ(code, 0) << testing::ReadText(dir.File(name + ".err"));
  return code;
}

TEST(RetentionTest, KeepsTheNewestNButNeverTheResumedOneOrLatest) {
  testing::ScratchDir dir;
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  const std::string ckpt = dir.File("ckpt");
  const std::string base =
      "--config " + cfg + " --init tiny --seq-len 32 --save " + ckpt + " --save-interval 1 ";
  // The newest two of seven.
  Train(base + "--steps 7 --save-total-limit 2", dir, "a");
  EXPECT_THAT(Tags(ckpt), ElementsAre("global_step6", "global_step7"));
  EXPECT_THAT(testing::ReadText(dir.File("a.out")),
              HasSubstr("checkpoint: removed global_step1 (--save-total-limit 2)"));

  // Resumed from global_step7, on to step 11 keeping 2: global_step7 stays as the resumed one.
  Train(base + "--steps 11 --save-total-limit 2 --load auto", dir, "b");
  EXPECT_THAT(Tags(ckpt), ElementsAre("global_step10", "global_step11", "global_step7"));

  // A fresh run into the same directory (no --load): its own global_step1 is what `latest`
  // names, older by step than those of the run before, and kept.
  Train(base + "--steps 1 --save-total-limit 1", dir, "c");
  EXPECT_EQ(testing::ReadText(ckpt + "/latest"), "global_step1\n");
  EXPECT_THAT(Tags(ckpt), ElementsAre("global_step1", "global_step11"));
}

TEST(RetentionTest, NeedsSave) {
  testing::ScratchDir dir;
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  testing::ChildProcess p(testing::Words(std::string(STRATA_BIN) + " train --config " + cfg +
                                         " --init tiny --steps 1 --save-total-limit 2"),
                          dir.File("1.out"), dir.File("1.err"));
  EXPECT_EQ(p.Wait(), 2);
  EXPECT_THAT(testing::ReadText(dir.File("1.err")), HasSubstr("--save-total-limit needs --save"));
}

}  // namespace
}  // namespace strata
