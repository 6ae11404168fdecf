// Preemption: SIGTERM during an NVMe training job stops it at a step boundary, saves there and
// exits 143; the same command resumes and the losses are the uninterrupted run's, bit for bit.
// A second signal exits at once. (World 2: preempt_mpi_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

constexpr int kSteps = 8;

std::string Args(const std::string& root, int steps, int save_interval = 2) {
  const std::string cfg = testing::WriteNvmeConfig(root + "/c.json", root + "/swap");
  return " train --config " + cfg + " --init tiny --seq-len 32 --seed 11 --steps " +
         std::to_string(steps) + " --save " + root + "/ckpt --save-interval " +
         std::to_string(save_interval) + " --load auto --json";
}

// Waits until `path` exists or the child ends.
void WaitFor(testing::ChildProcess& p, const fs::path& path) {
  while (!fs::exists(path) && !p.Ended()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The uninterrupted run's losses, in its own directory.
std::vector<double> Uninterrupted(const std::string& launcher, const std::string& root, int steps) {
  fs::create_directories(root);
  testing::ChildProcess p(testing::Words(launcher + std::string(STRATA_BIN) + Args(root, steps)),
                          root + ".out", root + ".err");
  EXPECT_EQ(p.Wait(), 0) << testing::ReadText(root + ".err");
  return testing::JsonLosses(testing::ReadText(root + ".out"));
}

TEST(PreemptTest, SigtermSavesAtAStepBoundaryAndTheSameCommandResumesBitwise) {
  testing::ScratchDir dir;
  const std::vector<double> all = Uninterrupted("", dir.File("ref"), kSteps);
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));

  const std::string root = dir.File("run");
  fs::create_directories(root);
  const std::vector<std::string> cmd = testing::Words(std::string(STRATA_BIN) + Args(root, kSteps));
  testing::ChildProcess p(cmd, dir.File("1.out"), dir.File("1.err"));
  WaitFor(p, fs::path(root) / "ckpt" / "global_step2");
  p.Signal(SIGTERM);
  ASSERT_EQ(p.Wait(), 143) << testing::ReadText(dir.File("1.err"));
  const std::string err = testing::ReadText(dir.File("1.err"));
  const std::vector<double> first = testing::JsonLosses(testing::ReadText(dir.File("1.out")));
  ASSERT_GE(first.size(), 2u);
  ASSERT_LT(first.size(), static_cast<size_t>(kSteps)) << "the signal came too late to test";
  const std::string step = std::to_string(first.size());
  EXPECT_THAT(err, HasSubstr("stopped by Terminated after step " + step));
  EXPECT_THAT(err, HasSubstr("run the same command with --load auto to continue"));
  EXPECT_EQ(testing::ReadText(root + "/ckpt/latest"), "global_step" + step + "\n");
  EXPECT_TRUE(fs::is_empty(root + "/swap")) << "a clean exit removes its swap files";

  // The advice, followed: the same command.
  testing::ChildProcess again(cmd, dir.File("2.out"), dir.File("2.err"));
  ASSERT_EQ(again.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::vector<double> rest = testing::JsonLosses(testing::ReadText(dir.File("2.out")));
  ASSERT_EQ(first.size() + rest.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(i < first.size() ? first[i] : rest[i - first.size()], all[i]) << "step " << i + 1;
  }
}

TEST(PreemptTest, ASecondSignalExitsAtOnceLeavingTheLastCheckpointLoadable) {
  testing::ScratchDir dir;
  const std::string root = dir.File("run");
  fs::create_directories(root);
  // A checkpoint at step 2, then a run of 12 steps that saves only when it stops.
  testing::ChildProcess first(testing::Words(std::string(STRATA_BIN) + Args(root, 2, 0)),
                              dir.File("0.out"), dir.File("0.err"));
  ASSERT_EQ(first.Wait(), 0) << testing::ReadText(dir.File("0.err"));
  const std::vector<std::string> cmd = testing::Words(std::string(STRATA_BIN) + Args(root, 12, 0));
  testing::ChildProcess p(cmd, dir.File("1.out"), dir.File("1.err"));
  WaitFor(p, fs::path(root) / "swap" / "strata-optimizer-rank0.swap");
  p.Signal(SIGINT);
  // The second one after the first was taken (two pending SIGINTs would be one): it lands in the
  // step the first lets finish, or in the save that follows it.
  while (testing::ReadText(dir.File("1.err")).find("signal received") == std::string::npos &&
         !p.Ended()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  p.Signal(SIGINT);
  EXPECT_EQ(p.Wait(), 130) << testing::ReadText(dir.File("1.err"));
  EXPECT_FALSE(p.killed_by_signal()) << "it exits, with 128 + SIGINT";
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_THAT(err, HasSubstr("a second signal exits at once"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("stopped by")));
  EXPECT_EQ(testing::ReadText(root + "/ckpt/latest"), "global_step2\n");
  // The same command resumes from the last complete checkpoint, whatever the exit interrupted.
  testing::ChildProcess again(cmd, dir.File("2.out"), dir.File("2.err"));
  EXPECT_EQ(again.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  EXPECT_EQ(testing::JsonLosses(testing::ReadText(dir.File("2.out"))).size(), 10u);
}

}  // namespace
}  // namespace strata
