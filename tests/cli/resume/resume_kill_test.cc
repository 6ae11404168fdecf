// The crash path a user takes: an NVMe training job is SIGKILLed at random moments (during
// steps, during saves), and after each kill the SAME command is run again (--load auto). No file
// is removed by hand: the swap files the killed run left are recreated (nobody holds their
// lock), a half-written checkpoint is ignored. The finished run must equal an uninterrupted one
// bit for bit: the losses after the last resume and the exported weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
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
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 30;

// The step `latest` names (0 when there is none yet).
int SavedStep(const std::string& latest) {
  const std::string tag = testing::ReadText(latest);
  return tag.starts_with("global_step") ? std::atoi(tag.c_str() + 11) : 0;
}

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

  // The uninterrupted run.
  testing::ChildProcess ref(Command(ref_root), dir.File("ref.out"), dir.File("ref.err"));
  ASSERT_EQ(ref.Wait(), 0) << testing::ReadText(dir.File("ref.err"));
  const std::vector<double> all = testing::JsonLosses(testing::ReadText(dir.File("ref.out")));
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));

  // Each attempt is killed at a random moment of its own run, whatever the machine's speed: the
  // first while it starts up (engine init, loading), the others a random 1-4 steps past the
  // checkpoint it resumed from plus up to 150 ms - inside a step or inside the save that follows
  // every step.
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::vector<std::string> cmd = Command(run_root);
  const std::string latest = run_root + "/ckpt/latest";
  int kills = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int saved = SavedStep(latest);
    if (saved >= kSteps - 4) break;  // leave the last run something to train
    testing::ChildProcess p(cmd, dir.File("kill.out"), dir.File("kill.err"));
    const int target = attempt == 0 ? 0 : saved + std::uniform_int_distribution<int>(1, 3)(rng);
    const auto extra = std::chrono::duration<double>(
        std::uniform_real_distribution<double>(0.0, attempt == 0 ? 0.5 : 0.15)(rng));
    while (!p.Ended() && SavedStep(latest) < target) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const auto at = Clock::now();
    while (!p.Ended() && Clock::now() - at < extra) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_FALSE(p.Ended()) << "attempt " << attempt << " ended before its kill (seed " << seed
                            << "): " << testing::ReadText(dir.File("kill.err"));
    p.Signal(SIGKILL);
    p.Wait();
    ++kills;
    const std::string err = testing::ReadText(dir.File("kill.err"));
    // Whatever the previous kill left, the rerun started: no refusal, no advice to delete files.
    EXPECT_THAT(err, ::testing::Not(HasSubstr("remove"))) << err;
    std::printf("attempt %d: resumed at step %d, killed %.0f ms past step %d\n", attempt, saved,
                extra.count() * 1e3, target);
  }

  // The last run of the same command, to the end.
  testing::ChildProcess last(cmd, dir.File("last.out"), dir.File("last.err"));
  ASSERT_EQ(last.Wait(), 0) << testing::ReadText(dir.File("last.err"));
  const std::string out = testing::ReadText(dir.File("last.out"));
  const std::vector<double> tail = testing::JsonLosses(out);
  ASSERT_LE(tail.size(), all.size());
  const size_t resumed_at = all.size() - tail.size();
  EXPECT_GT(resumed_at, 0u) << "the last run resumed";
  EXPECT_FALSE(tail.empty()) << "the last run trained";
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
  std::printf("ResumeKillTest: %d kills, last run resumed at step %zu (seed %llu)\n", kills,
              resumed_at, static_cast<unsigned long long>(seed));
}

}  // namespace
}  // namespace strata
