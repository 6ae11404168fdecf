// bench/overlap's aio sweep (MeasureAioSweep) reads what the swap files hold, not the space a
// fallocate reserved and nothing wrote: the filesystem answers reads there with zeros without
// touching the disk, so counting them made the disk look faster than it is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/overlap/bound_parts.h"
#include "tests/support/test_util.h"

namespace strata::bench {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Writes `bytes` of data at `offset` of `path` (created if needed).
void WriteAt(const std::string& path, uint64_t offset, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::vector<char> data(bytes, 'x');
  ASSERT_EQ(::pwrite(fd, data.data(), bytes, static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes));
  ::close(fd);
}

TEST(AioSweepTest, ReadsTheWrittenExtentsNotTheReservedSpace) {
  testing::ScratchDir dir;
  const std::string swap = dir.File("swap");
  std::filesystem::create_directories(swap);
  const std::string file = swap + "/strata-optimizer-rank0.swap";
  // 3 MiB written at the start, 2 MiB at 10 MiB, 32 MiB reserved in all, as a swap file grows.
  WriteAt(file, 0, 3 * kMiB);
  WriteAt(file, 10 * kMiB, 2 * kMiB);
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fallocate(fd, 0, 32 * kMiB), 0);
  ::close(fd);
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size), 32 * kMiB);

  Result<AioSpeed> speed = MeasureAioSweep(swap, AioOptions{}, kMiB, 4 * kMiB);
  ASSERT_TRUE(speed.ok()) << speed.status().ToString();
  // The filesystem may report an extent a little larger than what was written (its own
  // granularity), never the 32 MiB reserved.
  EXPECT_GE(speed->read_bytes, 5 * kMiB);
  EXPECT_LE(speed->read_bytes, 8 * kMiB);
  EXPECT_EQ(speed->files, 1);
}

TEST(AioSweepTest, FilesWithNothingWrittenAreNotASpeed) {
  testing::ScratchDir dir;
  const std::string swap = dir.File("swap");
  std::filesystem::create_directories(swap);
  const int fd = ::open((swap + "/strata-grad-rank0.swap").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fallocate(fd, 0, 16 * kMiB), 0);
  ::close(fd);
  Result<AioSpeed> speed = MeasureAioSweep(swap, AioOptions{}, kMiB, 4 * kMiB);
  ASSERT_FALSE(speed.ok());
  EXPECT_NE(speed.status().message().find("hold no written data"), std::string::npos)
      << speed.status().ToString();
}

}  // namespace
}  // namespace strata::bench
