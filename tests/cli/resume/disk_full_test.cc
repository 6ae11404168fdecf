// A full disk, on a small tmpfs the test mounts (mount(2) needs CAP_SYS_ADMIN: the tmpfs variant
// skips, saying so, without it) and, always, on a directory that fault injection makes a small
// filesystem (small_disk_preload.c). strata train refuses to start when --save's directory lacks
// the space of one checkpoint, saying how much is missing; a save that runs out of space midway
// fails naming the sizes, removes its unfinished directory and leaves the previous checkpoint
// intact: once space is freed (the tmpfs made larger) the same command resumes from it, bit for
// bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli/resume/child_process.h"
#include "tests/cli/resume/nvme_run.h"
#include "tests/cli/resume/small_disk.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::kMiB;
using testing::SmallDisk;
namespace fs = std::filesystem;

class DiskFullTest : public ::testing::TestWithParam<bool> {};

std::vector<std::string> Command(const std::string& cfg, const std::string& save, int steps) {
  return testing::Words(std::string(STRATA_BIN) + " train --config " + cfg +
                        " --init tiny --seq-len 32 --seed 3 --json --steps " +
                        std::to_string(steps) + " --save " + save +
                        " --save-interval 2 --load auto");
}

TEST_P(DiskFullTest, TooSmallSaveDirectoryIsRefusedAtStartSayingWhatIsMissing) {
  testing::ScratchDir dir;
  SmallDisk small(GetParam(), dir.File("small"), 4 * kMiB);
  READY_OR_SKIP(small);
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  const std::string save = small.dir() + "/ckpt";
  testing::ChildProcess p(Command(cfg, save, 2), dir.File("1.out"), dir.File("1.err"), small.env());
  EXPECT_EQ(p.Wait(), 1);
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_THAT(err, HasSubstr("not enough disk space: --save " + save + " needs "));
  EXPECT_THAT(err, HasSubstr("; the filesystem has 4 MiB free: "));
  EXPECT_THAT(err, HasSubstr("missing; free that much there or give a directory on a larger disk"));
  EXPECT_FALSE(fs::exists(fs::path(dir.File("swap")) / "strata-optimizer-rank0.swap"))
      << "refused before anything was placed";

  // Advice 1: a directory on a larger disk.
  testing::ChildProcess larger(Command(cfg, dir.File("ckpt"), 2), dir.File("2.out"),
                               dir.File("2.err"), small.env());
  EXPECT_EQ(larger.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  // Advice 2: free that much there.
  ASSERT_TRUE(small.Resize(32 * kMiB));
  testing::ChildProcess freed(Command(cfg, save, 2), dir.File("3.out"), dir.File("3.err"),
                              small.env());
  EXPECT_EQ(freed.Wait(), 0) << testing::ReadText(dir.File("3.err"));
}

TEST_P(DiskFullTest, TooSmallNvmePathIsRefusedAtStart) {
  testing::ScratchDir dir;
  SmallDisk small(GetParam(), dir.File("small"), 2 * kMiB);
  READY_OR_SKIP(small);
  const std::string swap = small.dir() + "/swap";
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), swap);
  testing::ChildProcess p(
      testing::Words(std::string(STRATA_BIN) + " train --config " + cfg + " --init tiny --steps 1"),
      dir.File("1.out"), dir.File("1.err"), small.env());
  EXPECT_EQ(p.Wait(), 1);
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_THAT(err, HasSubstr("not enough disk space: nvme_path " + swap + " needs "));
  EXPECT_THAT(err, HasSubstr("missing"));
}

TEST_P(DiskFullTest, SaveThatRunsOutOfSpaceKeepsThePreviousCheckpointLoadable) {
  testing::ScratchDir dir;
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), dir.File("swap"));
  // The uninterrupted run, on the real disk.
  testing::ChildProcess ref(Command(cfg, dir.File("ref"), 6), dir.File("r.out"), dir.File("r.err"));
  ASSERT_EQ(ref.Wait(), 0) << testing::ReadText(dir.File("r.err"));
  const std::vector<double> all = testing::JsonLosses(testing::ReadText(dir.File("r.out")));
  ASSERT_EQ(all.size(), 6u);

  // Room for one checkpoint (about 10 MiB for tiny) but not two.
  SmallDisk mid(GetParam(), dir.File("mid"), 16 * kMiB);
  READY_OR_SKIP(mid);
  const std::string save = mid.dir() + "/ckpt";
  const std::vector<std::string> cmd = Command(cfg, save, 6);
  testing::ChildProcess p(cmd, dir.File("1.out"), dir.File("1.err"), mid.env());
  EXPECT_EQ(p.Wait(), 1);
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_THAT(err, HasSubstr("saving global_step4 to " + save + " ran out of disk space"));
  EXPECT_THAT(err, HasSubstr("No space left on device"));
  EXPECT_THAT(err, HasSubstr("a checkpoint of this model needs "));
  EXPECT_THAT(err, HasSubstr("then run the same command with --load auto to continue from "
                             "global_step2, which is intact"));
  EXPECT_EQ(testing::ReadText(save + "/latest"), "global_step2\n");
  EXPECT_FALSE(fs::exists(save + "/global_step4.partial")) << "the unfinished save is removed";
  EXPECT_TRUE(fs::exists(save + "/global_step2/manifest.json"));

  // The advice: free the space (the filesystem grows), run the same command.
  ASSERT_TRUE(mid.Resize(64 * kMiB));
  testing::ChildProcess again(cmd, dir.File("2.out"), dir.File("2.err"), mid.env());
  ASSERT_EQ(again.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  const std::vector<double> rest = testing::JsonLosses(testing::ReadText(dir.File("2.out")));
  ASSERT_EQ(rest.size(), 4u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], all[2 + i]) << "step " << i + 3;
}

// Swap files grow by what the run reserves, and a fallocate that fails gives back what it got (as
// ext4 does not: the fault-injected disk keeps it, as ext4 would): a disk with room for the run's
// swap but not for a slack of 256 MiB a file (three files here) trains, and the space check's
// figure is what the files take.
TEST_P(DiskFullTest, SwapOnADiskWithRoomForTheRunButNoSlackTrains) {
  testing::ScratchDir dir;
  SmallDisk small(GetParam(), dir.File("small"), 24 * kMiB);
  READY_OR_SKIP(small);
  const std::string swap = small.dir() + "/swap";
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), swap);
  testing::ChildProcess p(testing::Words(std::string(STRATA_BIN) + " train --config " + cfg +
                                         " --init tiny --seq-len 32 --steps 2 --json"),
                          dir.File("1.out"), dir.File("1.err"), small.env());
  ASSERT_EQ(p.Wait(), 0) << testing::ReadText(dir.File("1.err"));
  const nlohmann::json j = testing::LastJson(testing::ReadText(dir.File("1.out")));
  const uint64_t planned = j["planned_bytes"]["nvme"].get<uint64_t>();
  EXPECT_GT(planned, 8 * kMiB) << "the disk must be a tight fit for the test to mean anything";
  EXPECT_LE(j["peak_bytes"]["nvme"].get<uint64_t>(), planned);
}

INSTANTIATE_TEST_SUITE_P(SmallDisks, DiskFullTest, ::testing::Values(true, false),
                         testing::SmallDiskKind);

}  // namespace
}  // namespace strata
