// Two runs on one nvme_path: the second is refused naming the first (its pid and command), and
// each piece of the refusal's advice works - another nvme_path runs at once, and the same one
// runs once the first has ended. A run SIGKILLed on that path leaves swap files nobody holds: the
// next run recreates them and says so in one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/resume/child_process.h"
#include "tests/cli/resume/nvme_run.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<std::string> Command(const std::string& cfg, int steps) {
  return testing::Words(std::string(STRATA_BIN) + " train --config " + cfg +
                        " --init tiny --seq-len 32 --json --steps " + std::to_string(steps));
}

void WaitFor(testing::ChildProcess& p, const fs::path& path) {
  while (!fs::exists(path) && !p.Ended()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(SwapOwnerTest, SecondRunOnOneNvmePathIsRefusedNamingTheFirst) {
  testing::ScratchDir dir;
  const std::string swap = dir.File("swap");
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), swap);
  testing::ChildProcess first(Command(cfg, 100000), dir.File("1.out"), dir.File("1.err"));
  WaitFor(first, fs::path(swap) / "strata-optimizer-rank0.swap");
  ASSERT_FALSE(first.Ended()) << testing::ReadText(dir.File("1.err"));

  testing::ChildProcess second(Command(cfg, 1), dir.File("2.out"), dir.File("2.err"));
  EXPECT_EQ(second.Wait(), 1);
  const std::string err = testing::ReadText(dir.File("2.err"));
  EXPECT_THAT(err, HasSubstr("is in use by pid " + std::to_string(first.pid()) + " (" +
                             std::string(STRATA_BIN) + " train --config " + cfg));
  EXPECT_THAT(err, HasSubstr("wait for it to end, or give this run another nvme_path"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;

  // Advice 1: another nvme_path.
  const std::string other = testing::WriteNvmeConfig(dir.File("other.json"), dir.File("swap2"));
  testing::ChildProcess elsewhere(Command(other, 1), dir.File("3.out"), dir.File("3.err"));
  EXPECT_EQ(elsewhere.Wait(), 0) << testing::ReadText(dir.File("3.err"));

  // Advice 2: wait for it to end (here: it is stopped).
  first.Signal(SIGTERM);
  EXPECT_EQ(first.Wait(), 143) << testing::ReadText(dir.File("1.err"));
  testing::ChildProcess after(Command(cfg, 1), dir.File("4.out"), dir.File("4.err"));
  EXPECT_EQ(after.Wait(), 0) << testing::ReadText(dir.File("4.err"));
}

TEST(SwapOwnerTest, SwapFilesOfAKilledRunAreRecreatedWithOneLine) {
  testing::ScratchDir dir;
  const std::string swap = dir.File("swap");
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), swap);
  testing::ChildProcess killed(Command(cfg, 100000), dir.File("1.out"), dir.File("1.err"));
  WaitFor(killed, fs::path(swap) / "strata-optimizer-rank0.swap");
  killed.Signal(SIGKILL);
  killed.Wait();
  ASSERT_TRUE(fs::exists(fs::path(swap) / "strata-optimizer-rank0.swap"));

  testing::ChildProcess next(Command(cfg, 2), dir.File("2.out"), dir.File("2.err"));
  EXPECT_EQ(next.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::string err = testing::ReadText(dir.File("2.err"));
  EXPECT_THAT(err, HasSubstr(swap + "/strata-optimizer-rank0.swap ("));
  EXPECT_THAT(err, HasSubstr("was left by an earlier run that did not exit cleanly and no process "
                             "holds it; recreated it"));
  EXPECT_EQ(testing::JsonLosses(testing::ReadText(dir.File("2.out"))).size(), 2u);
  EXPECT_TRUE(fs::is_empty(swap)) << "removed at the clean end";
}

}  // namespace
}  // namespace strata
