#include "engine/base/partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<size_t> RandomNumels(std::mt19937_64& rng, size_t count) {
  std::vector<size_t> n(count);
  for (size_t& x : n) x = rng() % 5 == 0 ? 1 + rng() % 7 : 1 + rng() % 5000;
  return n;
}

TEST(PartitionLayoutTest, RanksCoverEveryElementOnceWithAlignedDisjointSlots) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<size_t> numels = RandomNumels(rng, 1 + rng() % 20);
    const int world = 1 + static_cast<int>(rng() % 5);
    const size_t align = size_t{1} << (rng() % 6);
    std::vector<std::vector<int>> owner(numels.size());
    for (size_t p = 0; p < numels.size(); ++p) owner[p].assign(numels[p], 0);
    size_t partition_numel = 0;
    for (int r = 0; r < world; ++r) {
      Result<PartitionLayout> l = PartitionLayout::Create(numels, world, r, align);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      if (r == 0) partition_numel = l->partition_numel();
      EXPECT_EQ(l->partition_numel(), partition_numel) << "every rank's partition is equal";
      size_t end_of_previous = 0;
      for (const ShardSlice& s : l->slices()) {
        EXPECT_EQ(s.shard_numel * world >= s.numel, true);
        EXPECT_LT(s.shard_numel * world, s.numel + world);
        EXPECT_EQ(s.flat_offset % align, 0u);
        EXPECT_GE(s.flat_offset, end_of_previous);
        end_of_previous = s.flat_offset + s.shard_numel;
        EXPECT_LE(s.valid_numel, s.shard_numel);
        for (size_t i = 0; i < s.valid_numel; ++i) ++owner[s.param][s.param_offset + i];
      }
      EXPECT_LE(end_of_previous, l->partition_numel());
    }
    for (size_t p = 0; p < numels.size(); ++p) {
      for (size_t i = 0; i < numels[p]; ++i) ASSERT_EQ(owner[p][i], 1) << p << " @ " << i;
    }
  }
}

TEST(PartitionLayoutTest, SubGroupsCloseOnceTheyReachTheSize) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<size_t> numels = RandomNumels(rng, 1 + rng() % 30);
    const int world = 1 + static_cast<int>(rng() % 3);
    Result<PartitionLayout> l = PartitionLayout::Create(numels, world, 0, 16);
    ASSERT_TRUE(l.ok());
    const size_t size = 1 + rng() % 6000;
    std::vector<SubGroup> groups = l->SubGroups(size);
    ASSERT_FALSE(groups.empty());
    size_t next_slice = 0, next_flat = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      EXPECT_EQ(groups[g].first_slice, next_slice);
      EXPECT_EQ(groups[g].flat_begin, next_flat);
      EXPECT_LT(groups[g].first_slice, groups[g].end_slice);
      size_t sum = 0, sum_but_last = 0;
      for (size_t i = groups[g].first_slice; i < groups[g].end_slice; ++i) {
        sum_but_last = sum;
        sum += l->slices()[i].shard_numel;
      }
      if (groups.size() > 1 && g + 1 < groups.size()) {
        EXPECT_GE(sum, size);           // closed because it reached the size
        EXPECT_LT(sum_but_last, size);  // and not earlier
      }
      next_slice = groups[g].end_slice;
      next_flat = groups[g].flat_end;
    }
    EXPECT_EQ(next_slice, l->slices().size());
    EXPECT_EQ(next_flat, l->partition_numel());
  }
}

// sub_group_size 0 as DeepSpeed reads it: a group closes once it holds >= 0 elements, so every
// parameter is a sub-group of its own (zero-element shards included).
TEST(PartitionLayoutTest, SubGroupSizeZeroIsOneParameterPerGroup) {
  const size_t numels[] = {10, 3, 1, 7000, 2};
  Result<PartitionLayout> l = PartitionLayout::Create(numels, 4, 3, 8);
  ASSERT_TRUE(l.ok());
  std::vector<SubGroup> groups = l->SubGroups(0);
  ASSERT_EQ(groups.size(), 5u);
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(groups[g].first_slice, g);
    EXPECT_EQ(groups[g].end_slice, g + 1);
    EXPECT_EQ(groups[g].flat_begin, l->slices()[g].flat_offset);
  }
  EXPECT_EQ(groups.back().flat_end, l->partition_numel());
  // A size not smaller than the whole partition is still one group.
  EXPECT_EQ(l->SubGroups(1u << 20).size(), 1u);
}

// The NVMe optimizer's swap chunks (engine/nvme/swap_chunks.h): against an element-by-element
// reference, every piece lies in one sub-group, holds at most max elements, the pieces cover each
// group in order, and a piece's slices are exactly those whose slots (padding included) it touches.
TEST(PartitionLayoutTest, SplitSubGroupsCutsGroupsIntoBoundedPiecesWithTheSlicesTheyTouch) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<size_t> numels = RandomNumels(rng, 1 + rng() % 20);
    const int world = 1 + static_cast<int>(rng() % 3);
    const PartitionLayout l = PartitionLayout::Create(numels, world, 0, 64).value();
    const std::vector<SubGroup> groups = l.SubGroups(rng() % 3 == 0 ? 0 : 1 + rng() % 20000);
    const size_t max = 1 + rng() % 3000;
    const std::vector<SubGroup> pieces = l.SplitSubGroups(groups, max);
    // Slot of each element (padding belongs to the slot before it).
    std::vector<size_t> slot_of(l.partition_numel());
    for (size_t s = 0; s < l.slices().size(); ++s) {
      const size_t end =
          s + 1 < l.slices().size() ? l.slices()[s + 1].flat_offset : l.partition_numel();
      for (size_t e = l.slices()[s].flat_offset; e < end; ++e) slot_of[e] = s;
    }
    size_t next = 0, g = 0;
    for (const SubGroup& p : pieces) {
      ASSERT_EQ(p.flat_begin, next) << "trial " << trial;
      ASSERT_GT(p.flat_end, p.flat_begin);
      EXPECT_LE(p.flat_end - p.flat_begin, max);
      while (g < groups.size() && groups[g].flat_end <= p.flat_begin) ++g;
      ASSERT_LT(g, groups.size());
      EXPECT_LE(p.flat_end, groups[g].flat_end) << "a piece crosses a sub-group's end";
      // A piece ends short of max only at its group's end.
      if (p.flat_end - p.flat_begin < max) {
        EXPECT_EQ(p.flat_end, groups[g].flat_end);
      }
      EXPECT_EQ(p.first_slice, slot_of[p.flat_begin]);
      EXPECT_EQ(p.end_slice, slot_of[p.flat_end - 1] + 1);
      next = p.flat_end;
    }
    EXPECT_EQ(next, l.partition_numel());
    // Groups no larger than max stay whole; max 0 leaves every group whole.
    const std::vector<SubGroup> same = l.SplitSubGroups(groups, 0);
    ASSERT_EQ(same.size(), groups.size());
  }
}

TEST(PartitionLayoutTest, OddSizesPadTheLastRanks) {
  const size_t numels[] = {10};
  Result<PartitionLayout> r2 = PartitionLayout::Create(numels, 3, 2, 1);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->slices()[0].shard_numel, 4u);
  EXPECT_EQ(r2->slices()[0].param_offset, 8u);
  EXPECT_EQ(r2->slices()[0].valid_numel, 2u);
  const size_t tiny[] = {2};
  Result<PartitionLayout> t = PartitionLayout::Create(tiny, 4, 3, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->slices()[0].valid_numel, 0u);  // rank 3 of 4 holds only padding of 2 elements
}

TEST(PartitionLayoutTest, RejectsBadWorldRankAndAlignment) {
  const size_t numels[] = {4};
  EXPECT_THAT(PartitionLayout::Create(numels, 0, 0, 1).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("world size")));
  EXPECT_THAT(PartitionLayout::Create(numels, 2, 2, 1).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("rank 2 outside [0, 2)")));
  EXPECT_THAT(PartitionLayout::Create(numels, 2, 0, 0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("alignment")));
}

}  // namespace
}  // namespace strata
