// The crash path a user takes: an NVMe training job is SIGKILLed at random moments (during
// steps, during saves), and after each kill the SAME command is run again (--load auto). No file
// is removed by hand: the swap files the killed run left are recreated (nobody holds their
// lock), a half-written checkpoint is ignored. The finished run must equal an uninterrupted one
// bit for bit: the losses after the last resume and the exported weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/child_process.h"
#include "tests/cli/nvme_run.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 30;

// The one command line, in `root` (its own config, swap directory, checkpoints and export).
std::vector<std::string> Command(const std::string& root) {
  const std::string cfg = testing::WriteNvmeConfig(root + "/c.json", root + "/swap");
  return testing::Words(std::string(STRATA_BIN) + " train --config " + cfg +
                        " --init tiny --seq-len 32 --seed 7 --steps " + std::to_string(kSteps) +
                        " --save " + root + "/ckpt --save-interval 1 --load auto --export " + root +
                        "/hf --json");
}

TEST(ResumeKillTest, KilledAtRandomAndRerunEqualsAnUninterruptedRun) {
  testing::ScratchDir dir;
  const std::string ref_root = dir.File("ref"), run_root = dir.File("run");
  fs::create_directories(ref_root);
  fs::create_directories(run_root);

  // The uninterrupted run, timed: the kills fall inside a run of about this length.
  const auto t0 = Clock::now();
  testing::ChildProcess ref(Command(ref_root), dir.File("ref.out"), dir.File("ref.err"));
  ASSERT_EQ(ref.Wait(), 0) << testing::ReadText(dir.File("ref.err"));
  const double ref_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::vector<double> all = testing::JsonLosses(testing::ReadText(dir.File("ref.out")));
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));

  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> when(0.1 * ref_s, 0.5 * ref_s);
  const std::vector<std::string> cmd = Command(run_root);
  int kills = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const double delay = when(rng);
    testing::ChildProcess p(cmd, dir.File("kill.out"), dir.File("kill.err"));
    const auto start = Clock::now();
    while (!p.Ended() && Clock::now() - start < std::chrono::duration<double>(delay)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (p.Ended()) {  // finished (or failed) before the kill: it must have been a clean run
      ASSERT_EQ(p.Wait(), 0) << "attempt " << attempt << " (seed " << seed
                             << "): " << testing::ReadText(dir.File("kill.err"));
      break;
    }
    p.Signal(SIGKILL);
    p.Wait();
    ++kills;
    const std::string err = testing::ReadText(dir.File("kill.err"));
    // Whatever the previous kill left, the rerun started: no refusal, no advice to delete files.
    EXPECT_THAT(err, ::testing::Not(HasSubstr("remove"))) << err;
  }
  EXPECT_GE(kills, 1) << "seed " << seed;

  // The last run of the same command, to the end.
  testing::ChildProcess last(cmd, dir.File("last.out"), dir.File("last.err"));
  ASSERT_EQ(last.Wait(), 0) << testing::ReadText(dir.File("last.err"));
  const std::string out = testing::ReadText(dir.File("last.out"));
  const std::vector<double> tail = testing::JsonLosses(out);
  ASSERT_LE(tail.size(), all.size());
  const size_t resumed_at = all.size() - tail.size();
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(tail[i], all[resumed_at + i]) << "step " << resumed_at + i + 1 << ", seed " << seed;
  }
  // The exported weights, byte for byte.
  const std::string a = testing::ReadText(ref_root + "/hf/model.safetensors");
  const std::string b = testing::ReadText(run_root + "/hf/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "exported weights differ (seed " << seed << ")";
  // Nothing left behind: the swap files are gone after the clean end.
  EXPECT_TRUE(fs::is_empty(run_root + "/swap"));
  std::printf("ResumeKillTest: %d kills, last run resumed at step %zu, uninterrupted run %.1f s\n",
              kills, resumed_at, ref_s);
}

}  // namespace
}  // namespace strata
