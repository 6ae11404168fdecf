// A full disk at world 2: the ranks of one node put their swap files in the same nvme_path, so
// strata train's space check counts them together. Each rank alone fits on the disk, both do not:
// every rank refuses before anything is placed, naming the total and the share of each; both
// pieces of advice (free the space, or a directory on a larger disk) then train.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

class DiskFullMpiTest : public ::testing::TestWithParam<bool> {};

std::vector<std::string> Launch(const std::string& cfg) {
  return testing::Words(std::string(STRATA_BIN) + " launch --num_procs 2 -- " + STRATA_BIN +
                        " train --config " + cfg + " --init tiny --seq-len 32 --steps 2 --json");
}

TEST_P(DiskFullMpiTest, TheRanksOfANodeAreCheckedTogetherForTheirSwap) {
  testing::ScratchDir dir;
  // tiny's swap at world 2 is about 7.4 MiB a rank: room for one rank, not for two.
  SmallDisk small(GetParam(), dir.File("small"), 11 * kMiB);
  READY_OR_SKIP(small);
  const std::string swap = small.dir() + "/swap";
  const std::string cfg = testing::WriteNvmeConfig(dir.File("c.json"), swap);
  testing::ChildProcess p(Launch(cfg), dir.File("1.out"), dir.File("1.err"), small.env());
  EXPECT_EQ(p.Wait(), 1);
  const std::string err = testing::ReadText(dir.File("1.err"));
  EXPECT_THAT(err, HasSubstr("not enough disk space: nvme_path " + swap + " needs "));
  EXPECT_THAT(err, HasSubstr(" for each of the 2 ranks on this node); the filesystem has "));
  EXPECT_THAT(err, HasSubstr("missing; free that much there or give a directory on a larger disk"));
  EXPECT_FALSE(fs::exists(fs::path(swap) / "strata-optimizer-rank0.swap"));
  EXPECT_FALSE(fs::exists(fs::path(swap) / "strata-optimizer-rank1.swap"));

  // Advice 1: a directory on a larger disk.
  const std::string larger = testing::WriteNvmeConfig(dir.File("l.json"), dir.File("swap"));
  testing::ChildProcess on_larger(Launch(larger), dir.File("2.out"), dir.File("2.err"),
                                  small.env());
  EXPECT_EQ(on_larger.Wait(), 0) << testing::ReadText(dir.File("2.err"));
  // Advice 2: free that much there.
  ASSERT_TRUE(small.Resize(24 * kMiB));
  testing::ChildProcess freed(Launch(cfg), dir.File("3.out"), dir.File("3.err"), small.env());
  EXPECT_EQ(freed.Wait(), 0) << testing::ReadText(dir.File("3.err"));
}

INSTANTIATE_TEST_SUITE_P(SmallDisks, DiskFullMpiTest, ::testing::Values(true, false),
                         testing::SmallDiskKind);

}  // namespace
}  // namespace strata
