#include "swap/swap_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::RandomBytes;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Flips one byte of `file` at `offset`, behind the swap space's back.
void CorruptByte(const std::string& file, off_t offset) {
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
  b ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
  ::fsync(fd);
  ::close(fd);
}

class SwapSpaceTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    STRATA_AIO_OR_SKIP(GetParam());
    aio_ = MakeAio({});
    std::filesystem::create_directories(dir_.path() / "a");
    std::filesystem::create_directories(dir_.path() / "b");
  }
  // A handle whose engines inject `plan`'s faults.
  std::unique_ptr<AioHandle> MakeAio(testing::FaultPlan plan) {
    AioOptions o;
    o.engine = GetParam();
    o.thread_count = 2;
    IoEngineKind kind = GetParam();
    o.engine_factory = [plan, kind](
                           int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(kind, eo));
      return std::unique_ptr<IoEngine>(new testing::FaultyEngine(std::move(real), plan));
    };
    auto h = AioHandle::Create(o);
    EXPECT_THAT(h, ::strata::testing::IsOk());
    return h.ok() ? std::move(h).value() : nullptr;
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
  EXPECT_THAT(space->Read(id, back.data()).Wait(),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr("tensor " + std::to_string(id)),
                                                    HasSubstr("tensor offset 1048576"),
                                                    HasSubstr(space->files()[0] + " @ 1048576"))));
}

TEST_P(SwapSpaceTest, FilesAreRemovedOnDestructionAndStaleOnesRecreated) {
  std::vector<std::string> files;
  {
    auto space = std::move(SwapSpace::Create(Options(true), aio_.get())).value();
    files = space->files();
    for (const auto& f : files) EXPECT_TRUE(std::filesystem::exists(f));
  }
  for (const auto& f : files) EXPECT_FALSE(std::filesystem::exists(f));
  // A file left behind by a crashed run: nobody holds its lock, so it is truncated and reused.
  { std::ofstream(files[0]) << std::string(10000, 'x'); }
  auto reused = SwapSpace::Create(Options(true), aio_.get());
  ASSERT_TRUE(reused.ok()) << reused.status().ToString();
  auto data = RandomBytes(5 << 20, TestSeed());
  SwapId id = *(*reused)->Reserve(data.size());
  ASSERT_TRUE((*reused)->Write(id, data.data()).Wait().ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE((*reused)->Read(id, back.data()).Wait().ok());
  EXPECT_EQ(back, data);
}

TEST_P(SwapSpaceTest, FileHeldByAnotherSwapSpaceIsRefusedNamingThePid) {
  auto first = std::move(SwapSpace::Create(Options(true), aio_.get())).value();
  // flock belongs to the open file, so a second SwapSpace in this process is refused too; the
  // holder /proc/locks names is this process.
  EXPECT_THAT(SwapSpace::Create(Options(true), aio_.get()),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(first->files()[0] + " is in use by pid " +
                                       std::to_string(::getpid())),
                             HasSubstr("another nvme_path"))));
  for (const auto& f : first->files()) EXPECT_TRUE(std::filesystem::exists(f)) << "left alone";
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
  EXPECT_THAT(SwapSpace::Create(Options(false), aio_.get()),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr((*first)->files()[0]), HasSubstr("in use"))));
}

TEST_P(SwapSpaceTest, BadDirectoryAndUnwrittenReadsAreErrors) {
  SwapSpaceOptions o;
  o.dirs = {dir_.File("missing")};
  EXPECT_THAT(SwapSpace::Create(o, aio_.get()),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("missing"), HasSubstr("not an existing directory"))));
  auto space = std::move(SwapSpace::Create(Options(false), aio_.get())).value();
  SwapId id = *space->Reserve(100);
  std::vector<uint8_t> b(100);
  EXPECT_THAT(space->Read(id, b.data()).Wait(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("before it was ever written")));
  EXPECT_THAT(space->Read(id + 100, b.data()).Wait(),
              StatusIs(StatusCode::kNotFound, HasSubstr("unknown tensor")));
  EXPECT_THAT(space->Reserve(0), StatusIs(StatusCode::kInvalidArgument, HasSubstr("0-byte")));
}

TEST_P(SwapSpaceTest, ChecksumsAreOnByDefaultSoACorruptedBlockIsDataLoss) {
  EXPECT_TRUE(SwapSpaceOptions().checksums);
  auto space = std::move(SwapSpace::Create(Options(false), aio_.get())).value();
  auto data = RandomBytes(2 << 20, TestSeed());
  SwapId id = *space->Reserve(data.size());
  ASSERT_THAT(space->Write(id, data.data()).Wait(), ::strata::testing::IsOk());
  CorruptByte(space->files()[0], 4321);
  std::vector<uint8_t> back(data.size());
  EXPECT_THAT(space->Read(id, back.data()).Wait(),
              StatusIs(StatusCode::kDataLoss, HasSubstr("tensor offset 0")));
}

// A write that fails (here ENOSPC) must never read back as good data: the tensor is torn until a
// write succeeds, with or without checksums.
TEST_P(SwapSpaceTest, FailedWriteLeavesTheTensorTornUntilAWriteSucceeds) {
  for (bool checksums : {false, true}) {
    SCOPED_TRACE(checksums ? "checksums on" : "checksums off");
    testing::FaultPlan plan;
    plan.enospc_every = 2;
    plan.only_writes = true;
    plan.armed = std::make_shared<std::atomic<bool>>(false);
    auto aio = MakeAio(plan);
    ASSERT_NE(aio, nullptr);
    auto opts = Options(false);
    opts.checksums = checksums;
    auto space = std::move(SwapSpace::Create(opts, aio.get())).value();
    auto first = RandomBytes(3 << 20, TestSeed());
    auto second = RandomBytes(3 << 20, TestSeed() + 1);
    SwapId id = *space->Reserve(first.size());
    ASSERT_THAT(space->Write(id, first.data()).Wait(), ::strata::testing::IsOk());
    plan.armed->store(true);
    EXPECT_THAT(space->Write(id, second.data()).Wait(),
                StatusIs(StatusCode::kIoError, HasSubstr("No space left on device")));
    plan.armed->store(false);
    std::vector<uint8_t> back(first.size());
    EXPECT_THAT(space->Read(id, back.data()).Wait(),
                StatusIs(StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("tensor " + std::to_string(id)), HasSubstr("write failed"),
                               HasSubstr("No space left on device"))));
    // A successful write heals it.
    ASSERT_THAT(space->Write(id, second.data()).Wait(), ::strata::testing::IsOk());
    ASSERT_THAT(space->Read(id, back.data()).Wait(), ::strata::testing::IsOk());
    EXPECT_EQ(back, second);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapSpaceTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kLibaio),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

}  // namespace
}  // namespace strata
