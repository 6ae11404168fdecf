// A SIGKILL at any point of a save leaves the previous checkpoint loadable: a child process
// (checkpoint_crash_child) saving after every step is killed at each crash point of the save
// protocol, and at random moments; each time `latest` loads, its checksums verify, and its
// parameters equal an in-process reference run at the step the checkpoint records.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

extern char** environ;

namespace strata {
namespace {

using ::strata::testing::IsOk;

constexpr int kMaxSteps = 40;

// FNV-1a over every master's bytes.
uint64_t Hash(const std::vector<std::vector<float>>& masters) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& m : masters) {
    const auto* b = reinterpret_cast<const unsigned char*>(m.data());
    for (size_t i = 0; i < m.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

class CheckpointCrashTest : public ::testing::Test {
 protected:
  // The child's run, in process: hashes_[k] = the masters after step k.
  static void SetUpTestSuite() {
    auto comm = testing::MakeLocalComm();
    const testing::TokenData data = testing::RandomTokens(11, 64, 2, 16, 256);
    testing::EngineRun run = testing::MakeRun(*comm, {2, "none"}, 21, /*gas=*/1);
    hashes_.push_back(0);
    for (int s = 0; s < kMaxSteps; ++s) {
      hashes_.push_back(
          Hash(testing::TrainAndGather(*run.engine, data, 1, 1, nullptr, static_cast<size_t>(s))));
    }
  }

  static pid_t Spawn(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    std::string bin = CRASH_CHILD;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
    return pid;
  }

  // Loads `latest` into a fresh engine and checks it against the reference; returns its step
  // (0 if there is no checkpoint yet).
  static int64_t LoadAndVerify(const std::string& dir) {
    if (!std::filesystem::exists(std::filesystem::path(dir) / "latest")) return 0;
    auto comm = testing::MakeLocalComm();
    testing::EngineRun run = testing::MakeRun(*comm, {2, "none"}, 99, /*gas=*/1);
    Result<std::string> r = run.engine->LoadCheckpoint(dir);
    EXPECT_THAT(r.status(), IsOk());
    if (!r.ok()) return -1;
    const int64_t step = run.engine->stats().global_steps;
    EXPECT_GE(step, 1);
    EXPECT_LE(step, kMaxSteps);
    const testing::TokenData none;
    EXPECT_EQ(Hash(testing::TrainAndGather(*run.engine, none, 0, 1)), hashes_[step])
        << "step " << step;
    return step;
  }

  static std::vector<uint64_t> hashes_;
};

std::vector<uint64_t> CheckpointCrashTest::hashes_;

TEST_F(CheckpointCrashTest, KillAtEveryCrashPointLeavesALoadableCheckpoint) {
  struct Case {
    const char* point;
    const char* tag;
    int64_t expect_step;  // 0: either 1 or 2 is right
  };
  for (Case c : {Case{"shard_written", "-", 1}, Case{"manifest_written", "-", 1},
                 Case{"before_rename", "-", 1}, Case{"renamed", "-", 1},
                 Case{"latest_written", "-", 2}, Case{"before_rename", "same", 1},
                 Case{"old_moved", "same", 1}, Case{"renamed", "same", 2}}) {
    SCOPED_TRACE(std::string(c.point) + " tag " + c.tag);
    testing::ScratchDir dir;
    const pid_t pid = Spawn({dir.File("c"), "point", c.point, "2", c.tag});
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child was to die at " << c.point << "; status " << status;
    EXPECT_EQ(LoadAndVerify(dir.File("c")), c.expect_step);
  }
}

TEST_F(CheckpointCrashTest, KillAtRandomMomentsLeavesALoadableCheckpoint) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 5; ++round) {
    testing::ScratchDir dir;
    const pid_t pid = Spawn({dir.File("c"), "loop", std::to_string(kMaxSteps)});
    // Once the first checkpoint exists (the child is past its start-up), a random moment in
    // the next steps and saves.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(std::filesystem::path(dir.File("c")) / "latest") &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 400000)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    const int64_t step = LoadAndVerify(dir.File("c"));
    EXPECT_GE(step, 1) << "round " << round;
    std::printf("round %d: killed %s; latest loads at step %lld\n", round,
                WIFSIGNALED(status) ? "mid-run" : "after the end", static_cast<long long>(step));
  }
}

}  // namespace
}  // namespace strata
