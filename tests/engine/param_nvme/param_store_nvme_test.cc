// ParamStore on NVMe (engine/zero/store/param_store_nvme.cc, param_store_nvme_write.cc) on its own:
// random bytes written through Write come back through Acquire while the shards cycle through
// buffers that hold two at a time; a partial-range Write keeps the neighbours; Prefetch beyond the
// buffers' capacity does not fail; unwritten shards read as zeros; a flipped byte on disk is
// DataLoss naming the swap file; the CPU-kept shards (max_in_cpu) never touch NVMe and can move
// into the caller's flat array.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/zero/store/param_store.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

// Shards of 3000, 1000, 50, 2900, 1, 2000 elements (64-aligned slots); two buffers of 3000.
const std::vector<size_t> kNumels = {3000, 1000, 50, 2900, 1, 2000};
constexpr size_t kShardElements = 8951;  // their sum (world 1: a shard is the parameter)

struct Fixture {
  explicit Fixture(DType dtype, size_t max_in_cpu = 0, size_t buffer_count = 2,
                   size_t buffer_size = 3000) {
    device = testing::MakeHostDevice();
    layout = PartitionLayout::Create(kNumels, 1, 0, 64).value();
    ParamStoreOptions o;
    o.tier = Tier::kNvme;
    o.device = device.get();
    o.layout = &layout;
    o.dtype = dtype;
    o.pin_memory = false;
    o.swapper.nvme_paths = {dir.path().string()};
    o.swapper.pin_memory = false;
    o.swapper.buffer_count = buffer_count;
    o.swapper.buffer_size = buffer_size;
    o.swapper.max_in_cpu = max_in_cpu;
    Result<std::unique_ptr<ParamStore>> s = ParamStore::Create(o);
    EXPECT_THAT(s.status(), IsOk());
    if (s.ok()) store = std::move(s).value();
    stream = device->CreateStream().value();
  }
  ~Fixture() {
    store.reset();
    device->DestroyStream(stream).IgnoreError();
  }
  size_t cb() const { return DTypeBytes(store->options().dtype); }
  size_t bytes() const { return layout.partition_numel() * cb(); }
  std::string swap_file() const { return dir.File("strata-param-rank0.swap"); }

  // Acquires every shard in turn (Done after each) and compares it with `want` (flat bytes).
  void ExpectShards(const std::vector<uint8_t>& want) {
    for (size_t i = 0; i < kNumels.size(); ++i) {
      const ShardSlice& s = layout.slices()[i];
      Result<ShardView> v = store->Acquire(i);
      ASSERT_THAT(v.status(), IsOk()) << "param " << i;
      EXPECT_TRUE(v->on_host);
      EXPECT_EQ(std::memcmp(v->data, want.data() + s.flat_offset * cb(), s.shard_numel * cb()), 0)
          << "param " << i;
      ASSERT_THAT(store->Done(i, stream), IsOk());
    }
  }

  ScratchDir dir;
  std::unique_ptr<Device> device;
  PartitionLayout layout;
  std::unique_ptr<ParamStore> store;
  Stream stream;
};

TEST(NvmeParamStoreTest, WriteThenAcquireRoundTripsRandomBytesThroughCyclingBuffers) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Fixture f(dtype);
    ASSERT_NE(f.store, nullptr);
    EXPECT_EQ(f.store->flat(), nullptr);
    EXPECT_EQ(f.store->tier(), Tier::kNvme);
    const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
    ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
    EXPECT_EQ(f.store->nvme_write_bytes(), kShardElements * f.cb());
    // Twice: the second pass reads again (the buffers hold two shards at most).
    f.ExpectShards(a);
    f.ExpectShards(a);
    EXPECT_GE(f.store->nvme_read_bytes(), kShardElements * f.cb());
    // A second Write replaces the values (the shards may still sit in the buffers).
    const std::vector<uint8_t> b = testing::RandomBytes(f.bytes(), testing::TestSeed() + 1);
    ASSERT_THAT(f.store->Write(0, b.data(), f.layout.partition_numel(), f.stream), IsOk());
    f.ExpectShards(b);
    StepBreakdown sb;
    f.store->AddTo(&sb);
    EXPECT_EQ(sb.nvme_read_bytes, f.store->nvme_read_bytes());
    EXPECT_EQ(sb.nvme_write_bytes, f.store->nvme_write_bytes());
    StepBreakdown again;
    f.store->AddTo(&again);
    EXPECT_EQ(again.nvme_read_bytes, 0u);  // only what happened since the last call
  }
}

TEST(NvmeParamStoreTest, UnwrittenShardsReadAsZeros) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  f.ExpectShards(std::vector<uint8_t>(f.bytes(), 0));
  EXPECT_EQ(f.store->nvme_read_bytes(), 0u);
}

TEST(NvmeParamStoreTest, PartialWriteKeepsTheNeighbours) {
  Fixture f(DType::kBFloat16);
  ASSERT_NE(f.store, nullptr);
  std::vector<uint8_t> want = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, want.data(), f.layout.partition_numel(), f.stream), IsOk());
  // From the middle of shard 0 to the middle of shard 3 (covering 1 and 2 whole).
  const size_t begin = f.layout.slices()[0].flat_offset + 1234;
  const size_t end = f.layout.slices()[3].flat_offset + 1000;
  const std::vector<uint8_t> b = testing::RandomBytes((end - begin) * f.cb(), 99);
  ASSERT_THAT(f.store->Write(begin, b.data(), end - begin, f.stream), IsOk());
  std::memcpy(want.data() + begin * f.cb(), b.data(), b.size());
  f.ExpectShards(want);
  // A partial write while the shard sits in a buffer (acquired and done just now).
  const size_t five = f.layout.slices()[5].flat_offset + 7;
  const std::vector<uint8_t> c = testing::RandomBytes(3 * f.cb(), 5);
  ASSERT_THAT(f.store->Write(five, c.data(), 3, f.stream), IsOk());
  std::memcpy(want.data() + five * f.cb(), c.data(), c.size());
  f.ExpectShards(want);
}

// Note [Filling a shard]: the optimizer's write-back comes a swap chunk at a time. A shard written
// in pieces (out of order, one of them twice) is written to NVMe once, when they cover it, and
// its old bytes are never read for that.
TEST(NvmeParamStoreTest, AShardWrittenInPiecesIsWrittenOnceWhenCovered) {
  Fixture f(DType::kBFloat16);
  ASSERT_NE(f.store, nullptr);
  std::vector<uint8_t> want = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, want.data(), f.layout.partition_numel(), f.stream), IsOk());
  ASSERT_THAT(f.store->Drain(), IsOk());
  const uint64_t read0 = f.store->nvme_read_bytes(), written0 = f.store->nvme_write_bytes();
  const std::vector<uint8_t> b = testing::RandomBytes(3000 * f.cb(), 21);
  const size_t at = f.layout.slices()[0].flat_offset;
  for (const auto& [lo, hi] :
       std::vector<std::pair<size_t, size_t>>{{0, 1000}, {2000, 3000}, {500, 1500}, {1000, 2000}}) {
    EXPECT_EQ(f.store->nvme_write_bytes(), written0) << "before [" << lo << ", " << hi << ")";
    ASSERT_THAT(f.store->Write(at + lo, b.data() + lo * f.cb(), hi - lo, f.stream), IsOk());
  }
  ASSERT_THAT(f.store->Drain(), IsOk());
  EXPECT_EQ(f.store->nvme_write_bytes(), written0 + 3000 * f.cb());
  EXPECT_EQ(f.store->nvme_read_bytes(), read0);
  std::memcpy(want.data() + at * f.cb(), b.data(), b.size());
  f.ExpectShards(want);
}

TEST(NvmeParamStoreTest, PartialWriteOfAnUnwrittenShardZeroFillsTheRest) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  std::vector<uint8_t> want(f.bytes(), 0);
  const size_t begin = f.layout.slices()[3].flat_offset + 10;
  const std::vector<uint8_t> b = testing::RandomBytes(100 * f.cb(), 3);
  ASSERT_THAT(f.store->Write(begin, b.data(), 100, f.stream), IsOk());
  std::memcpy(want.data() + begin * f.cb(), b.data(), b.size());
  f.ExpectShards(want);
}

TEST(NvmeParamStoreTest, PrefetchBeyondTheBuffersDoesNotFail) {
  // Three buffers (36 KiB for 44 KiB of shards): with two, where the one acquired 12 KiB shard
  // lands decides whether a second fits at all (the swap arena does not move held ranges), and
  // that depends on which writes are still in flight.
  Fixture f(DType::kFloat32, 0, 3);
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  std::vector<size_t> all(kNumels.size());
  std::iota(all.begin(), all.end(), 0);
  // Every shard at once: more than the two buffers hold. Best effort, not an error.
  EXPECT_THAT(f.store->Prefetch(all), IsOk());
  f.ExpectShards(a);
  // Prefetch while shards are acquired, then acquire the prefetched ones: the store drops
  // prefetched shards nobody holds to make room.
  Result<ShardView> v0 = f.store->Acquire(0);
  ASSERT_THAT(v0.status(), IsOk());
  EXPECT_THAT(f.store->Prefetch(all), IsOk());
  for (size_t i = 5; i >= 1; --i) {
    Result<ShardView> v = f.store->Acquire(i);
    ASSERT_THAT(v.status(), IsOk()) << i;
    const ShardSlice& s = f.layout.slices()[i];
    EXPECT_EQ(std::memcmp(v->data, a.data() + s.flat_offset * 4, s.shard_numel * 4), 0) << i;
    ASSERT_THAT(f.store->Done(i, f.stream), IsOk());
  }
  ASSERT_THAT(f.store->Done(0, f.stream), IsOk());
  EXPECT_THAT(f.store->Prefetch(std::vector<size_t>{99}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no parameter 99")));
}

TEST(NvmeParamStoreTest, AShardGatheredAgainWhileItsBufferIsFreeIsNotReadAgain) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  for (int round = 0; round < 100; ++round) {
    Result<ShardView> v = f.store->Acquire(1);
    ASSERT_THAT(v.status(), IsOk());
    EXPECT_EQ(std::memcmp(v->data, a.data() + f.layout.slices()[1].flat_offset * 4, 4000), 0);
    ASSERT_THAT(f.store->Done(1, f.stream), IsOk());
  }
  // Its write was finished to make room for the later shards': read once, then Done keeps the
  // buffer until it is needed.
  EXPECT_EQ(f.store->nvme_read_bytes(), 4000u);
}

// After a Write, the shards whose writes are still in flight (the buffers hold the last two) are
// served from their buffers without a read; the ones flushed earlier to make room are read. Every
// shard holds what was written either way.
TEST(NvmeParamStoreTest, AShardWhoseWriteIsInFlightIsServedFromItsBuffer) {
  Fixture f(DType::kFloat32, /*max_in_cpu=*/0, /*buffer_count=*/4);
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  // Shards 5 (2000) and 4 (1) were written last: both still in a buffer.
  for (size_t i : {size_t{5}, size_t{4}}) {
    const ShardSlice& s = f.layout.slices()[i];
    Result<ShardView> v = f.store->Acquire(i);
    ASSERT_THAT(v.status(), IsOk());
    EXPECT_EQ(std::memcmp(v->data, a.data() + s.flat_offset * 4, s.shard_numel * 4), 0);
    ASSERT_THAT(f.store->Done(i, f.stream), IsOk());
  }
  EXPECT_EQ(f.store->nvme_read_bytes(), 0u);
  // Every shard, served from a buffer or read back after the writes finish, holds what was written.
  ASSERT_THAT(f.store->Drain(), IsOk());
  f.ExpectShards(a);
  f.ExpectShards(a);
}

TEST(NvmeParamStoreTest, AcquireNestsAndDoneWithoutAcquireIsRefused) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  Result<ShardView> a = f.store->Acquire(1);
  Result<ShardView> b = f.store->Acquire(1);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(a->data, b->data);
  EXPECT_THAT(f.store->Done(1, f.stream), IsOk());
  EXPECT_THAT(f.store->Done(1, f.stream), IsOk());
  EXPECT_THAT(f.store->Done(1, f.stream),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("not acquired")));
}

TEST(NvmeParamStoreTest, BuffersFullOfAcquiredShardsIsOutOfMemoryNamingTheKeys) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  ASSERT_THAT(f.store->Acquire(0).status(), IsOk());  // 3000 elements
  ASSERT_THAT(f.store->Acquire(3).status(), IsOk());  // 2900: the two buffers are taken
  EXPECT_THAT(f.store->Acquire(5).status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("offload_param.buffer_count")));
  ASSERT_THAT(f.store->Done(0, f.stream), IsOk());
  EXPECT_THAT(f.store->Acquire(5).status(), IsOk());  // waits for shard 0's event
  ASSERT_THAT(f.store->Done(3, f.stream), IsOk());
  ASSERT_THAT(f.store->Done(5, f.stream), IsOk());
  EXPECT_THAT(f.store->Write(0, nullptr, f.layout.partition_numel() + 1, f.stream),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("past the partition")));
}

TEST(NvmeParamStoreTest, ACorruptedBlockOnDiskIsDataLossNamingTheFile) {
  Fixture f(DType::kFloat32);
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  {
    std::fstream file(f.swap_file(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good()) << f.swap_file();
    char c = 0;
    file.seekg(100);
    file.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    file.seekp(100);
    file.write(&c, 1);
  }
  EXPECT_THAT(f.store->Acquire(0).status(),
              StatusIs(StatusCode::kDataLoss, ::testing::AllOf(HasSubstr("strata-param-rank0.swap"),
                                                               HasSubstr("parameter shard 0"))));
  // The others are intact, and a full rewrite heals shard 0.
  ASSERT_THAT(f.store->Acquire(1).status(), IsOk());
  ASSERT_THAT(f.store->Done(1, f.stream), IsOk());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  f.ExpectShards(a);
}

TEST(NvmeParamStoreTest, ShardsWithinMaxInCpuStayInCpuMemory) {
  // 3000 + 1000 + 50 elements kept in CPU (the running total stays within 4050); 2900, 1 and
  // 2000 on NVMe.
  Fixture f(DType::kFloat32, 4050);
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  f.ExpectShards(a);
  f.ExpectShards(a);
  EXPECT_EQ(f.store->nvme_bytes(), 12288u + 4096u + 8192u);  // 4 KiB-aligned extents
  EXPECT_GE(f.store->cpu_bytes(), 4050u * 4u);
  EXPECT_EQ(f.store->nvme_write_bytes(), (2900u + 1u + 2000u) * 4u);
}

// Note [Shared CPU shards]: after ShareCpuFlat the CPU-kept shards are ranges of the caller's
// flat array (their bytes moved there), a Write from another buffer lands in that array, a Write
// from the array itself changes nothing, and the NVMe shards are untouched by either.
TEST(NvmeParamStoreTest, SharedCpuShardsAreRangesOfTheFlatArray) {
  Fixture f(DType::kFloat32, 4050);  // params 0-2 kept in CPU, 3-5 on NVMe
  ASSERT_NE(f.store, nullptr);
  const std::vector<uint8_t> a = testing::RandomBytes(f.bytes(), testing::TestSeed());
  ASSERT_THAT(f.store->Write(0, a.data(), f.layout.partition_numel(), f.stream), IsOk());
  std::vector<uint8_t> flat(f.bytes(), 0xAB);
  const uint64_t cpu_before = f.store->cpu_bytes();
  ASSERT_THAT(f.store->ShareCpuFlat(flat.data()), IsOk());
  // The array's owner counts them: the store's own storage (4 KiB-rounded) is freed.
  EXPECT_GE(cpu_before - f.store->cpu_bytes(), 4050u * 4u);
  // Whether shard i's range of the array holds `want`'s bytes there.
  auto in_flat = [&](size_t i, const std::vector<uint8_t>& want) {
    const ShardSlice& s = f.layout.slices()[i];
    const size_t at = s.flat_offset * f.cb();
    return std::memcmp(flat.data() + at, want.data() + at, s.shard_numel * f.cb()) == 0;
  };
  // The CPU shards' bytes moved into the array; the NVMe shards' ranges are not the store's.
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(in_flat(i, a)) << "param " << i;
  EXPECT_EQ(flat[f.layout.slices()[3].flat_offset * f.cb()], 0xAB);
  for (size_t i = 0; i < 3; ++i) {
    Result<ShardView> v = f.store->Acquire(i);
    ASSERT_THAT(v.status(), IsOk());
    EXPECT_EQ(v->data, flat.data() + f.layout.slices()[i].flat_offset * f.cb()) << "param " << i;
    ASSERT_THAT(f.store->Done(i, f.stream), IsOk());
  }
  f.ExpectShards(a);
  // A Write from elsewhere lands in the array.
  const std::vector<uint8_t> b = testing::RandomBytes(f.bytes(), testing::TestSeed() + 1);
  ASSERT_THAT(f.store->Write(0, b.data(), f.layout.partition_numel(), f.stream), IsOk());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(in_flat(i, b)) << "param " << i;
  f.ExpectShards(b);
  // New values written into the array, then "written" from it: every shard reads them.
  const std::vector<uint8_t> c = testing::RandomBytes(f.bytes(), testing::TestSeed() + 2);
  std::memcpy(flat.data(), c.data(), c.size());
  ASSERT_THAT(f.store->Write(0, flat.data(), f.layout.partition_numel(), f.stream), IsOk());
  f.ExpectShards(c);
}

TEST(NvmeParamStoreTest, AShardLargerThanTheBuffersIsRefusedAtCreate) {
  ScratchDir dir;
  auto device = testing::MakeHostDevice();
  const std::vector<size_t> numels = {5000};
  PartitionLayout layout = PartitionLayout::Create(numels, 1, 0, 64).value();
  ParamStoreOptions o;
  o.tier = Tier::kNvme;
  o.device = device.get();
  o.layout = &layout;
  o.pin_memory = false;
  o.swapper.nvme_paths = {dir.path().string()};
  o.swapper.pin_memory = false;
  o.swapper.buffer_count = 1;
  o.swapper.buffer_size = 1000;
  o.swapper.max_in_cpu = 0;
  EXPECT_THAT(ParamStore::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("buffer_count x buffer_size"),
                                        HasSubstr("parameter shard 0"))));
}

}  // namespace
}  // namespace strata
