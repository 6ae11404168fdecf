#include "swap/swap_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::RandomBytes;
using ::strata::testing::ScratchDir;
using ::strata::testing::TestSeed;

class SwapSpaceTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    AioOptions o;
    o.engine = GetParam();
    o.thread_count = 2;
    aio_ = std::move(AioHandle::Create(o)).value();
    std::filesystem::create_directories(dir_.path() / "a");
    std::filesystem::create_directories(dir_.path() / "b");
  }
  SwapSpaceOptions Options(bool two_dirs) {
    SwapSpaceOptions s;
    s.dirs = {(dir_.path() / "a").string()};
    if (two_dirs) s.dirs.push_back((dir_.path() / "b").string());
    s.stripe_min_bytes = 1 << 20;
    s.grow_bytes = 8 << 20;
    return s;
  }
  ScratchDir dir_;
  std::unique_ptr<AioHandle> aio_;
};

TEST_P(SwapSpaceTest, RoundTripsStripedAndWholeTensorsOverTwoDirectories) {
  auto opts = Options(true);
  opts.checksums = true;
  auto space = SwapSpace::Create(opts, aio_.get());
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  uint64_t seed = TestSeed();
  std::vector<size_t> sizes = {1, 4095, 4096, 100000, (1 << 20) + 3, (5 << 20) + 77, 3 << 20};
  std::vector<std::vector<uint8_t>> data;
  std::vector<SwapId> ids;
  std::vector<SwapFuture> fs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(RandomBytes(sizes[i], seed + i));
    auto id = (*space)->Reserve(sizes[i]);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (size_t i = 0; i < ids.size(); ++i) fs.push_back((*space)->Write(ids[i], data[i].data()));
  for (auto& f : fs) ASSERT_TRUE(f.Wait().ok());
  // Both files got data: large tensors were striped.
  for (const auto& f : (*space)->files()) EXPECT_GT(std::filesystem::file_size(f), 1u << 20) << f;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<uint8_t> back(sizes[i]);
    ASSERT_TRUE((*space)->Read(ids[i], back.data()).Wait().ok());
    ASSERT_EQ(back, data[i]) << "tensor " << i;
  }
  // Freed room is reused.
  uint64_t before = (*space)->reserved_bytes();
  ASSERT_TRUE((*space)->Free(ids[1]).ok());
  auto again = (*space)->Reserve(4000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*space)->reserved_bytes(), before);
}

TEST_P(SwapSpaceTest, ChecksumMismatchIsDataLossNamingTensorAndOffset) {
  auto opts = Options(false);
  opts.checksums = true;
  auto space = std::move(SwapSpace::Create(opts, aio_.get())).value();
  auto data = RandomBytes(3 << 20, TestSeed());
  SwapId id = *space->Reserve(data.size());
  ASSERT_TRUE(space->Write(id, data.data()).Wait().ok());
  // Flip one byte in the second 1 MiB block, behind the swapper's back.
  int fd = ::open(space->files()[0].c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, (1 << 20) + 12345), 1);
  b ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &b, 1, (1 << 20) + 12345), 1);
  ::fsync(fd);
  ::close(fd);
  std::vector<uint8_t> back(data.size());
  Status s = space->Read(id, back.data()).Wait();
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("tensor " + std::to_string(id)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tensor offset 1048576"), std::string::npos) << s.message();
}

TEST_P(SwapSpaceTest, FilesAreRemovedOnDestructionAndStaleOnesDetected) {
  std::vector<std::string> files;
  {
    auto space = std::move(SwapSpace::Create(Options(true), aio_.get())).value();
    files = space->files();
    for (const auto& f : files) EXPECT_TRUE(std::filesystem::exists(f));
  }
  for (const auto& f : files) EXPECT_FALSE(std::filesystem::exists(f));
  // A file left behind by a crashed run.
  { std::ofstream(files[0]) << "left over"; }
  auto stale = SwapSpace::Create(Options(true), aio_.get());
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("stale swap file"), std::string::npos)
      << stale.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(files[0])) << "a refused stale file must be left alone";
  EXPECT_FALSE(SwapSpace::Create(Options(true), aio_.get()).ok()) << "still stale";
  auto opts = Options(true);
  opts.reuse_stale = true;
  auto reused = SwapSpace::Create(opts, aio_.get());
  ASSERT_TRUE(reused.ok()) << reused.status().ToString();
  auto data = RandomBytes(5 << 20, TestSeed());
  SwapId id = *(*reused)->Reserve(data.size());
  ASSERT_TRUE((*reused)->Write(id, data.data()).Wait().ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE((*reused)->Read(id, back.data()).Wait().ok());
  EXPECT_EQ(back, data);
}

TEST_P(SwapSpaceTest, ReserveFreeChurnOfMixedSizesDoesNotGrowTheFile) {
  auto space = std::move(SwapSpace::Create(Options(false), aio_.get())).value();
  std::vector<SwapId> live;
  uint64_t high = 0;
  for (int round = 0; round < 50; ++round) {
    for (size_t sz : {size_t{5000}, size_t{70000}, size_t{300000}}) {
      live.push_back(*space->Reserve(sz * (1 + round % 3)));
    }
    while (live.size() > 6) {
      ASSERT_TRUE(space->Free(live.front()).ok());
      live.erase(live.begin());
    }
    if (round == 10) high = std::filesystem::file_size(space->files()[0]);
  }
  EXPECT_LE(std::filesystem::file_size(space->files()[0]), high + (8 << 20));
  for (SwapId id : live) ASSERT_TRUE(space->Free(id).ok());
  EXPECT_EQ(space->reserved_bytes(), 0u);
}

TEST_P(SwapSpaceTest, SecondUserOfTheSameFileIsRefused) {
  auto first = SwapSpace::Create(Options(false), aio_.get());
  ASSERT_TRUE(first.ok());
  auto second = SwapSpace::Create(Options(false), aio_.get());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

TEST_P(SwapSpaceTest, BadDirectoryAndUnwrittenReadsAreErrors) {
  SwapSpaceOptions o;
  o.dirs = {dir_.File("missing")};
  auto s = SwapSpace::Create(o, aio_.get());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing"), std::string::npos);
  auto space = std::move(SwapSpace::Create(Options(false), aio_.get())).value();
  SwapId id = *space->Reserve(100);
  std::vector<uint8_t> b(100);
  EXPECT_EQ(space->Read(id, b.data()).Wait().code(), StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapSpaceTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kLibaio),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

}  // namespace
}  // namespace strata
