// The optimizer's swap plan (engine/nvme/swap_chunks.h, Note [Auto swap chunks]): under
// strata.swap_chunk_bytes "auto" (the default) the pinned bytes of buffer_count 64 MiB chunks cut
// into 32 MiB ones; an explicit chunk keeps buffer_count; small models and a count past the
// swapper's limit keep the 64 MiB cut. Expected figures are worked out here from the element
// size and the 4 KiB padding, not taken from the code under test.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "engine/nvme/swap_chunks.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

// Elements of a chunk of `mib` MiB: whole 4 KiB pages (1024 fp32) of each of three parts.
constexpr uint64_t ChunkNumel(uint64_t mib) { return (mib << 20) / 12 / 1024 * 1024; }
// A chunk's pinned buffer: three parts, each padded to 4 KiB.
constexpr uint64_t Extent(uint64_t numel) { return 3 * ((numel * 4 + 4095) / 4096 * 4096); }

Config Load(const std::string& optimizer_device, int64_t sub_group_size, int buffer_count,
            const std::string& chunk) {
  const std::string text =
      "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
      "\"sub_group_size\": " +
      std::to_string(sub_group_size) + ", \"offload_optimizer\": {\"device\": \"" +
      optimizer_device +
      "\", \"nvme_path\": \"/tmp\", \"buffer_count\": " + std::to_string(buffer_count) + "}}" +
      (chunk.empty() ? "" : ", \"strata\": {\"swap_chunk_bytes\": " + chunk + "}") + "}";
  Result<Config> c = LoadConfigText(text, "test-config", RunContext{});
  EXPECT_THAT(c.status(), IsOk()) << text;
  return c.ok() ? *c : Config{};
}

// 8 parameters of 16M elements on one rank: 1.6 GB of state.
PartitionLayout Large() {
  return PartitionLayout::Create(std::vector<size_t>(8, size_t{1} << 24), 1, 0, 64).value();
}

// 64 parameters of 1 Mi elements: sub-groups close at sub_group_size (a parameter is not split).
PartitionLayout ManySmall() {
  return PartitionLayout::Create(std::vector<size_t>(64, size_t{1} << 20), 1, 0, 64).value();
}

uint64_t Largest(const OptimizerSwapPlan& p) {
  uint64_t n = 0;
  for (const SubGroup& g : p.groups) n = std::max<uint64_t>(n, g.flat_end - g.flat_begin);
  return n;
}

void ExpectCovers(const OptimizerSwapPlan& p, const PartitionLayout& l, uint64_t max_numel) {
  size_t next = 0;
  for (const SubGroup& g : p.groups) {
    ASSERT_EQ(g.flat_begin, next);
    EXPECT_LE(g.flat_end - g.flat_begin, max_numel);
    next = g.flat_end;
  }
  EXPECT_EQ(next, l.partition_numel());
}

TEST(SwapPlanTest, AutoCutsThePinnedBytesOfBufferCount64MiBChunksInto32MiBOnes) {
  const PartitionLayout l = Large();
  for (const std::string& chunk : {std::string(), std::string("\"auto\"")}) {
    SCOPED_TRACE(chunk.empty() ? "key absent" : "auto");
    const OptimizerSwapPlan p = PlanOptimizerSwap(l, Load("nvme", 1'000'000'000, 4, chunk));
    EXPECT_EQ(p.chunk_bytes, uint64_t{32} << 20);
    EXPECT_EQ(Largest(p), ChunkNumel(32));
    ExpectCovers(p, l, ChunkNumel(32));
    // 2730 pages a part at 32 MiB, 5461 at 64: eight fine buffers fit in four coarse ones' bytes
    // (49152 bytes to spare), nine do not.
    EXPECT_EQ(p.buffer_count, 8);
    EXPECT_LE(8 * Extent(ChunkNumel(32)), 4 * Extent(ChunkNumel(64)));
    EXPECT_GT(9 * Extent(ChunkNumel(32)), 4 * Extent(ChunkNumel(64)));
  }
  // Three buffers of 64 MiB chunks: six of 32.
  EXPECT_EQ(PlanOptimizerSwap(l, Load("nvme", 1'000'000'000, 3, "")).buffer_count, 6);
}

TEST(SwapPlanTest, AnExplicitChunkKeepsBufferCount) {
  const PartitionLayout l = Large();
  for (uint64_t mib : {64, 32, 16}) {
    const OptimizerSwapPlan p =
        PlanOptimizerSwap(l, Load("nvme", 1'000'000'000, 4, "\"" + std::to_string(mib) + "M\""));
    EXPECT_EQ(p.chunk_bytes, mib << 20);
    EXPECT_EQ(p.buffer_count, 4);
    EXPECT_EQ(Largest(p), ChunkNumel(mib));
    ExpectCovers(p, l, ChunkNumel(mib));
  }
}

// Sub-groups of 4 parameters (4 Mi elements, 48 MiB of state): whole at 64 MiB, so 4 buffers of
// 48 MiB; at 32 MiB the largest unit is a full 32 MiB chunk and floor(4 x 48 MiB / its 31.99
// MiB) = 6 buffers fit.
TEST(SwapPlanTest, AutoFitsAsManyFineBuffersAsTheCoarseBytesHold) {
  const PartitionLayout l = ManySmall();
  const OptimizerSwapPlan p = PlanOptimizerSwap(l, Load("nvme", 4'000'000, 4, ""));
  EXPECT_EQ(p.chunk_bytes, uint64_t{32} << 20);
  const uint64_t coarse = 4 * Extent(uint64_t{4} << 20), fine = Extent(ChunkNumel(32));
  EXPECT_EQ(coarse, 4 * (uint64_t{48} << 20));
  EXPECT_EQ(p.buffer_count, 6);
  EXPECT_LE(6 * fine, coarse);
  EXPECT_GT(7 * fine, coarse);
  ExpectCovers(p, l, ChunkNumel(32));
}

// Sub-groups of one parameter (1 Mi elements, 12 MiB) are cut alike at both sizes: the count
// stays buffer_count.
TEST(SwapPlanTest, SmallSubGroupsKeepBufferCount) {
  const PartitionLayout l = ManySmall();
  const OptimizerSwapPlan p = PlanOptimizerSwap(l, Load("nvme", 1'000'000, 4, ""));
  EXPECT_EQ(p.buffer_count, 4);
  EXPECT_EQ(Largest(p), uint64_t{1} << 20);
  EXPECT_EQ(p.groups.size(), 64u);
  ExpectCovers(p, l, uint64_t{1} << 20);
}

// 40 buffers would be 80 at 32 MiB, past the swapper's 64: the 64 MiB cut stays.
TEST(SwapPlanTest, AutoKeeps64MiBChunksWhereTheCountWouldPassTheSwappersLimit) {
  const PartitionLayout l = Large();
  const OptimizerSwapPlan p = PlanOptimizerSwap(l, Load("nvme", 1'000'000'000, 40, ""));
  EXPECT_EQ(p.chunk_bytes, uint64_t{64} << 20);
  EXPECT_EQ(p.buffer_count, 40);
  EXPECT_EQ(Largest(p), ChunkNumel(64));
  EXPECT_EQ(PlanOptimizerSwap(l, Load("nvme", 1'000'000'000, 32, "")).buffer_count, 64);
}

// Without NVMe the sub-groups are not cut.
TEST(SwapPlanTest, OptimizerOnCpuIsNotCut) {
  const PartitionLayout l = Large();
  const OptimizerSwapPlan p = PlanOptimizerSwap(l, Load("cpu", 1'000'000'000, 4, ""));
  EXPECT_EQ(p.chunk_bytes, 0u);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].flat_end, l.partition_numel());
}

}  // namespace
}  // namespace strata
