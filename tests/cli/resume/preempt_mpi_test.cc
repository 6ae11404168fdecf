// Preemption at world 2: two ranks of an NVMe training job under mpirun; SIGTERM reaches one rank
// only and both stop after the same step, save there and exit 143; the same command resumes and
// the losses are the uninterrupted run's, bit for bit.
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

std::string Args(const std::string& root, int steps) {
  const std::string cfg = testing::WriteNvmeConfig(root + "/c.json", root + "/swap");
  return " train --config " + cfg + " --init tiny --seq-len 32 --seed 11 --steps " +
         std::to_string(steps) + " --save " + root + "/ckpt --save-interval 2 --load auto --json";
}

// Waits until `path` exists or the child ends.
void WaitFor(testing::ChildProcess& p, const fs::path& path) {
  while (!fs::exists(path) && !p.Ended()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The pids whose parent is `parent`.
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string pid, comm, state;
    pid_t ppid = 0;
    if (stat >> pid >> comm >> state >> ppid && ppid == parent) out.push_back(std::stoi(pid));
  }
  return out;
}

// The uninterrupted run's losses, in its own directory.
std::vector<double> Uninterrupted(const std::string& launcher, const std::string& root, int steps) {
  fs::create_directories(root);
  testing::ChildProcess p(testing::Words(launcher + std::string(STRATA_BIN) + Args(root, steps)),
                          root + ".out", root + ".err");
  EXPECT_EQ(p.Wait(), 0) << testing::ReadText(root + ".err");
  return testing::JsonLosses(testing::ReadText(root + ".out"));
}

// Two ranks under mpirun; SIGTERM reaches rank 1 only, as when a node's agent signals its own
// processes. Rank 0 learns it through the per-step agreement: both stop after the same step.
TEST(PreemptMpiTest, WorldTwoUnderMpirunStopsBothRanksAfterTheSameStep) {
  testing::ScratchDir dir;
  const std::string mpirun = std::string(MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 ";
  const std::vector<double> all = Uninterrupted(mpirun, dir.File("ref"), kSteps);
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));

  const std::string root = dir.File("run");
  fs::create_directories(root);
  const std::vector<std::string> cmd =
      testing::Words(mpirun + std::string(STRATA_BIN) + Args(root, kSteps));
  testing::ChildProcess p(cmd, dir.File("1.out"), dir.File("1.err"));
  WaitFor(p, fs::path(root) / "ckpt" / "global_step2");
  pid_t rank1 = -1;
  for (pid_t c : Children(p.pid())) {
    std::ifstream env("/proc/" + std::to_string(c) + "/environ");
    std::string all_env((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all_env.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos) {
      rank1 = c;
    }
  }
  ASSERT_GT(rank1, 0) << "no rank 1 among mpirun's children";
  kill(rank1, SIGTERM);
  const int code = p.Wait();
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_EQ(code, 143) << err;
  const std::vector<double> first = testing::JsonLosses(testing::ReadText(dir.File("1.out")));
  ASSERT_GE(first.size(), 2u) << err;
  ASSERT_LT(first.size(), static_cast<size_t>(kSteps));
  EXPECT_THAT(err, HasSubstr("stopped by Terminated after step " + std::to_string(first.size())));
  EXPECT_EQ(testing::ReadText(root + "/ckpt/latest"),
            "global_step" + std::to_string(first.size()) + "\n");

  testing::ChildProcess again(cmd, dir.File("2.out"), dir.File("2.err"));
  ASSERT_EQ(again.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::vector<double> rest = testing::JsonLosses(testing::ReadText(dir.File("2.out")));
  ASSERT_EQ(first.size() + rest.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(i < first.size() ? first[i] : rest[i - first.size()], all[i]) << "step " << i + 1;
  }
}
// strata launch: SIGTERM to the launcher reaches every rank through mpirun (as SIGUSR1, which
// mpirun forwards without killing the job a second later) and becomes a SIGTERM there; the ranks
// stop after the same step, save and the launcher exits 143. A slow save would survive too.
TEST(PreemptMpiTest, StrataLaunchForwardsSigtermSoEveryRankSavesAtTheSameStep) {
  testing::ScratchDir dir;
  const std::string launch = std::string(STRATA_BIN) + " launch --num_procs 2 -- ";
  const std::vector<double> all = Uninterrupted(launch, dir.File("ref"), kSteps);
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));

  const std::string root = dir.File("run");
  fs::create_directories(root);
  const std::vector<std::string> cmd =
      testing::Words(launch + std::string(STRATA_BIN) + Args(root, kSteps));
  testing::ChildProcess p(cmd, dir.File("1.out"), dir.File("1.err"));
  WaitFor(p, fs::path(root) / "ckpt" / "global_step2");
  p.Signal(SIGTERM);
  const int code = p.Wait();
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_EQ(code, 143) << err;
  const std::vector<double> first = testing::JsonLosses(testing::ReadText(dir.File("1.out")));
  ASSERT_GE(first.size(), 2u) << err;
  ASSERT_LT(first.size(), static_cast<size_t>(kSteps));
  const std::string step = std::to_string(first.size());
  EXPECT_THAT(err, HasSubstr("stopped by Terminated after step " + step));
  EXPECT_THAT(err, HasSubstr("strata launch: stopped by signal 15"));
  EXPECT_EQ(testing::ReadText(root + "/ckpt/latest"), "global_step" + step + "\n");

  testing::ChildProcess again(cmd, dir.File("2.out"), dir.File("2.err"));
  ASSERT_EQ(again.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::vector<double> rest = testing::JsonLosses(testing::ReadText(dir.File("2.out")));
  ASSERT_EQ(first.size() + rest.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(i < first.size() ? first[i] : rest[i - first.size()], all[i]) << "step " << i + 1;
  }
}

// --export without --save at world 2: each parameter gathered from both ranks' NVMe-resident
// partitions; byte for byte the export of the same run's saved checkpoint.
TEST(PreemptMpiTest, WorldTwoExportWithoutSaveEqualsTheCheckpointsExport) {
  testing::ScratchDir dir;
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  const std::string base = std::string(MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " +
                           STRATA_BIN + " train --config " + cfg +
                           " --init tiny --seq-len 32 --steps 2 ";
  testing::ChildProcess saved(
      testing::Words(base + "--save " + dir.File("ckpt") + " --export " + dir.File("a")),
      dir.File("1.out"), dir.File("1.err"));
  ASSERT_EQ(saved.Wait(), 0) << testing::ReadText(dir.File("1.err"));
  testing::ChildProcess direct(testing::Words(base + "--export " + dir.File("b")),
                               dir.File("2.out"), dir.File("2.err"));
  ASSERT_EQ(direct.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::string a = testing::ReadText(dir.File("a") + "/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == testing::ReadText(dir.File("b") + "/model.safetensors"));
}

}  // namespace
}  // namespace strata
