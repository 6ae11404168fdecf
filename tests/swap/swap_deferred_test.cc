// Checksums by the caller (swap/swap_space.cc, Note [Checksums by the caller]): a read whose
// verification is deferred to VerifyBlocks still finds a corrupted block and names its tensor,
// file and offset; a write with the caller's per-block sums is validated and its sums are the
// ones a later verified read checks.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include "swap/optimizer_swapper.h"
#include "swap/swap_space.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::RandomBytes;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kBlock = size_t{1} << 20;

// Flips one byte of `file` at `offset`, behind the swap space's back.
void FlipByte(const std::string& file, off_t offset) {
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
  b ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
  // No fsync: an O_DIRECT read writes the dirty range back first.
  ::close(fd);
}

// Per-block XXH3-64 of `data`, computed here independently of the swap space.
std::vector<uint64_t> ReferenceSums(const std::vector<uint8_t>& data) {
  std::vector<uint64_t> sums;
  for (size_t off = 0; off < data.size(); off += kBlock) {
    sums.push_back(XXH3_64bits(data.data() + off, std::min(kBlock, data.size() - off)));
  }
  return sums;
}

class SwapDeferredChecksumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto h = AioHandle::Create(AioOptions{});
    ASSERT_THAT(h, IsOk());
    aio_ = std::move(h).value();
    std::filesystem::create_directories(dir_.path() / "a");
    std::filesystem::create_directories(dir_.path() / "b");
  }
  std::unique_ptr<SwapSpace> MakeSpace(bool two_dirs, bool checksums = true) {
    SwapSpaceOptions s;
    s.dirs = {(dir_.path() / "a").string()};
    if (two_dirs) s.dirs.push_back((dir_.path() / "b").string());
    s.stripe_min_bytes = 1 << 20;
    s.grow_bytes = 8 << 20;
    s.checksums = checksums;
    auto space = SwapSpace::Create(s, aio_.get());
    EXPECT_THAT(space, IsOk());
    return space.ok() ? std::move(space).value() : nullptr;
  }
  ScratchDir dir_;
  std::unique_ptr<AioHandle> aio_;
};

TEST_F(SwapDeferredChecksumTest, DeferredReadLeavesACorruptedBlockToVerifyBlocks) {
  auto space = MakeSpace(false);
  const auto data = RandomBytes((3 << 20) + 5, TestSeed());  // 4 blocks, the last 5 bytes
  const SwapId id = *space->Reserve(data.size());
  ASSERT_EQ(space->num_blocks(id), 4u);
  ASSERT_THAT(space->Write(id, data.data()).Wait(), IsOk());
  FlipByte(space->files()[0], (2 << 20) + 777);

  std::vector<uint8_t> back(data.size());
  ASSERT_THAT(space->Read(id, back.data(), /*verify=*/false).Wait(), IsOk());
  std::vector<uint64_t> sums(2);
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 0, 2, sums.data()), IsOk());
  const std::vector<uint64_t> want = ReferenceSums(data);
  EXPECT_EQ(sums[0], want[0]);
  EXPECT_EQ(sums[1], want[1]);
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 3, 1), IsOk());
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 1, 2),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("checksum mismatch in tensor " + std::to_string(id)),
                             HasSubstr("tensor offset 2097152"),
                             HasSubstr(space->files()[0] + " @ 2097152"))));
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 3, 2),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("which has 4")));
  // The ordinary read still verifies everything itself.
  EXPECT_THAT(space->Read(id, back.data()).Wait(),
              StatusIs(StatusCode::kDataLoss, HasSubstr("tensor offset 2097152")));
}

TEST_F(SwapDeferredChecksumTest, VerifyBlocksNamesTheSecondFileOfAStripedTensor) {
  auto space = MakeSpace(true);
  const auto data = RandomBytes(6 << 20, TestSeed() + 1);  // 3 MiB per directory
  const SwapId id = *space->Reserve(data.size());
  ASSERT_THAT(space->Write(id, data.data()).Wait(), IsOk());
  FlipByte(space->files()[1], (1 << 20) + 3);  // tensor offset 4 MiB + 3
  std::vector<uint8_t> back(data.size());
  ASSERT_THAT(space->Read(id, back.data(), false).Wait(), IsOk());
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 0, 4), IsOk());
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 4, 2),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr("tensor offset 4194304"),
                                                    HasSubstr(space->files()[1] + " @ 1048576"))));
}

TEST_F(SwapDeferredChecksumTest, CallerSumsEqualTheSpacesOwnAndAreTheOnesChecked) {
  auto space = MakeSpace(false);
  const auto data = RandomBytes((2 << 20) + 4096 + 9, TestSeed() + 2);
  const SwapId id = *space->Reserve(data.size());
  const std::vector<uint64_t> sums = ReferenceSums(data);
  for (size_t b = 0; b < sums.size(); ++b) {
    EXPECT_EQ(SwapSpace::BlockChecksum(data.data() + b * kBlock,
                                       std::min(kBlock, data.size() - b * kBlock)),
              sums[b]);
  }
  ASSERT_THAT(space->Write(id, data.data(), sums).Wait(), IsOk());
  std::vector<uint8_t> back(data.size());
  ASSERT_THAT(space->Read(id, back.data()).Wait(), IsOk());
  EXPECT_EQ(back, data);
  // The same as the space's own: a write it hashes itself verifies against the same sums.
  ASSERT_THAT(space->Write(id, data.data()).Wait(), IsOk());
  std::vector<uint64_t> own(sums.size());
  ASSERT_THAT(space->Read(id, back.data(), false).Wait(), IsOk());
  ASSERT_THAT(space->VerifyBlocks(id, back.data(), 0, own.size(), own.data()), IsOk());
  EXPECT_EQ(own, sums);

  // A wrong count is refused before any I/O; the tensor keeps its contents.
  std::vector<uint64_t> short_sums(sums.begin(), sums.end() - 1);
  EXPECT_THAT(space->Write(id, data.data(), short_sums).Wait(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("with 2 block checksums"), HasSubstr("are 3 blocks"))));
  ASSERT_THAT(space->Read(id, back.data()).Wait(), IsOk());
  // The given sums are the ones recorded: a wrong one makes the next verified read DataLoss.
  std::vector<uint64_t> bad = sums;
  bad[2] ^= 1;
  ASSERT_THAT(space->Write(id, data.data(), bad).Wait(), IsOk());
  EXPECT_THAT(space->Read(id, back.data()).Wait(),
              StatusIs(StatusCode::kDataLoss, HasSubstr("tensor offset 2097152")));
}

TEST_F(SwapDeferredChecksumTest, WithChecksumsOffCallerSumsAreIgnored) {
  auto space = MakeSpace(false, /*checksums=*/false);
  const auto data = RandomBytes(3 << 20, TestSeed() + 3);
  const SwapId id = *space->Reserve(data.size());
  ASSERT_THAT(space->Write(id, data.data(), {}).Wait(), IsOk());
  FlipByte(space->files()[0], 10);
  std::vector<uint8_t> back(data.size());
  ASSERT_THAT(space->Read(id, back.data(), false).Wait(), IsOk());
  EXPECT_THAT(space->VerifyBlocks(id, back.data(), 0, 3), IsOk());
}

TEST_F(SwapDeferredChecksumTest, OptimizerSwapperDefersAndTakesCallerSums) {
  OptimizerSwapperOptions o;
  o.nvme_paths = {(dir_.path() / "a").string()};
  o.pin_memory = false;
  o.buffer_count = 2;
  auto opt = CpuOptimizer::Create(OptimizerKind::kAdam);
  ASSERT_THAT(opt, IsOk());
  ASSERT_THAT(opt->AddGroup(DefaultHyperparams(OptimizerKind::kAdam)), IsOk());
  auto sw = OptimizerSwapper::Create(o, aio_.get(), &*opt);
  ASSERT_THAT(sw, IsOk());
  OptimizerSwapper& s = **sw;
  const size_t n = 300'000;  // parts of 1,200,128 bytes: blocks straddle them
  ASSERT_THAT(s.AddSubGroup(n, 0), IsOk());
  ASSERT_EQ(s.part_bytes(0), 1'200'128u);
  ASSERT_EQ(s.num_blocks(0), 4u);  // 3 x 1,200,128 bytes
  std::vector<float> p(n, 1.5f), m(n, 0.25f), v(n, 0.125f);
  ASSERT_THAT(s.Initialize(0, p.data(), m.data(), v.data()), IsOk());
  ASSERT_THAT(s.PrepareBuffers(), IsOk());
  const std::string file = (dir_.path() / "a" / "strata-optimizer-rank0.swap").string();
  FlipByte(file, 1'200'128 + 100);  // exp_avg, in the block it shares with params
  ASSERT_THAT(s.ReadAsync(0, 1, /*deferred=*/true).Wait(), IsOk());
  EXPECT_THAT(s.VerifyBlocks(0, 1, 0, 1), IsOk());
  EXPECT_THAT(s.VerifyBlocks(0, 1, 1, 1),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("tensor offset 1048576"), HasSubstr(file + " @ 1048576"))));
  EXPECT_THAT(s.ReadAsync(0, 1).Wait(),
              StatusIs(StatusCode::kDataLoss, HasSubstr("tensor offset 1048576")));
  // Rewritten from the buffer with its own sums (count checked), it reads back verified.
  std::vector<uint64_t> sums(4);
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.BufferState(0, 1).params);
  for (size_t b = 0; b < 4; ++b) {
    sums[b] = XXH3_64bits(bytes + b * kBlock, std::min(kBlock, 3 * s.part_bytes(0) - b * kBlock));
  }
  EXPECT_THAT(s.WriteAsync(0, 1, std::vector<uint64_t>(3)).Wait(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("with 3 block checksums")));
  ASSERT_THAT(s.WriteAsync(0, 1, sums).Wait(), IsOk());
  EXPECT_THAT(s.ReadAsync(0, 0).Wait(), IsOk());
  std::vector<float> m_back(n);
  ASSERT_THAT(s.ReadState(0, nullptr, m_back.data(), nullptr), IsOk());
  EXPECT_NE(m_back, m);  // the flipped byte was written back as read (and is now its data)
  m_back[25] = m[25];    // element 25 of exp_avg holds byte 100
  EXPECT_EQ(m_back, m);
}

}  // namespace
}  // namespace strata
