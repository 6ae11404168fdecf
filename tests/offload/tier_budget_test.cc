// TierBudget accounting: limits, OOM text, peaks, RAII reservations, concurrency.
#include "offload/tier_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::Eq;
using ::testing::HasSubstr;
using testing::StatusIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(TierTest, ParsesNamesAndRejectsOthers) {
  for (Tier t : kAllTiers) EXPECT_EQ(t, *ParseTier(TierName(t)));
  EXPECT_THAT(ParseTier("gpu"), StatusIs(StatusCode::kInvalidArgument,
                                         Eq("unknown tier 'gpu' (allowed: device, cpu, nvme)")));
}

TEST(TierBudgetTest, TracksCurrentPeakAndCountsPerTier) {
  TierBudget budget({64 * kMiB, TierBudget::kUnlimited, 1024 * kMiB});
  ASSERT_TRUE(budget.Reserve(Tier::kDevice, 40 * kMiB).ok());
  ASSERT_TRUE(budget.Reserve(Tier::kDevice, 20 * kMiB).ok());
  budget.Release(Tier::kDevice, 40 * kMiB);
  ASSERT_TRUE(budget.Reserve(Tier::kCpu, 5 * kMiB).ok());
  const TierStats d = budget.Stats(Tier::kDevice);
  EXPECT_EQ(64 * kMiB, d.limit_bytes);
  EXPECT_EQ(20 * kMiB, d.current_bytes);
  EXPECT_EQ(60 * kMiB, d.peak_bytes);
  EXPECT_EQ(2u, d.alloc_count);
  EXPECT_EQ(1u, d.free_count);
  EXPECT_EQ(0u, d.oom_count);
  EXPECT_EQ(5 * kMiB, budget.Stats(Tier::kCpu).current_bytes);
  EXPECT_EQ(0u, budget.Stats(Tier::kNvme).peak_bytes);
  budget.ResetPeaks();
  EXPECT_EQ(20 * kMiB, budget.Stats(Tier::kDevice).peak_bytes);
}

TEST(TierBudgetTest, RefusesOverLimitWithTierAskedAndFree) {
  TierBudget budget({TierBudget::kUnlimited, 8 * kMiB, TierBudget::kUnlimited});
  ASSERT_TRUE(budget.Reserve(Tier::kCpu, 6 * kMiB).ok());
  EXPECT_THAT(budget.Reserve(Tier::kCpu, 3 * kMiB, "optimizer state sub-group 3"),
              StatusIs(StatusCode::kOutOfMemory,
                       Eq("out of memory on tier cpu: asked 3 MiB for optimizer state sub-group "
                          "3, free 2 MiB of 8 MiB limit (in use 6 MiB, peak 6 MiB)")));
  EXPECT_EQ(6 * kMiB, budget.Stats(Tier::kCpu).current_bytes);  // nothing counted
  EXPECT_EQ(1u, budget.Stats(Tier::kCpu).oom_count);
  EXPECT_TRUE(budget.Reserve(Tier::kCpu, 2 * kMiB).ok());  // exactly full is fine
  EXPECT_THAT(budget.Reserve(Tier::kCpu, 1),
              StatusIs(StatusCode::kOutOfMemory,
                       HasSubstr("out of memory on tier cpu: asked 1 B, free 0 B")));
}

TEST(TierBudgetTest, ReservationReleasesOnDestructionAndMove) {
  TierBudget budget;
  {
    auto r = budget.Acquire(Tier::kNvme, 100);
    ASSERT_TRUE(r.ok());
    TierReservation moved = std::move(r).value();
    EXPECT_EQ(100u, budget.Stats(Tier::kNvme).current_bytes);
    TierReservation other;
    other = std::move(moved);
    EXPECT_FALSE(moved.active());
    EXPECT_TRUE(other.active());
  }
  EXPECT_EQ(0u, budget.Stats(Tier::kNvme).current_bytes);
  EXPECT_EQ(1u, budget.Stats(Tier::kNvme).free_count);
}

TEST(TierBudgetTest, ConcurrentReserveAndReleaseNeverExceedTheLimit) {
  constexpr uint64_t kLimit = 1000;
  TierBudget budget({kLimit, TierBudget::kUnlimited, TierBudget::kUnlimited});
  std::vector<std::thread> threads;
  std::atomic<uint64_t> ok{0}, refused{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const uint64_t n = 1 + (i * 7 + t) % 300;
        if (budget.Reserve(Tier::kDevice, n).ok()) {
          ok.fetch_add(1);
          EXPECT_LE(budget.Stats(Tier::kDevice).current_bytes, kLimit);
          budget.Release(Tier::kDevice, n);
        } else {
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const TierStats s = budget.Stats(Tier::kDevice);
  EXPECT_EQ(0u, s.current_bytes);
  EXPECT_LE(s.peak_bytes, kLimit);
  EXPECT_EQ(ok.load(), s.alloc_count);
  EXPECT_EQ(ok.load(), s.free_count);
  EXPECT_EQ(refused.load(), s.oom_count);
}

TEST(TierBudgetTest, PrintsATableWithOneRowPerTier) {
  TierBudget budget({kMiB << 10, TierBudget::kUnlimited, TierBudget::kUnlimited});
  ASSERT_TRUE(budget.Reserve(Tier::kDevice, 512 * kMiB).ok());
  const std::string table = budget.FormatTable();
  EXPECT_EQ(
      "tier    limit       in use      peak          allocs    frees   OOMs\n"
      "device  1 GiB       512 MiB     512 MiB            1        0      0\n"
      "cpu     unlimited   0 B         0 B                0        0      0\n"
      "nvme    unlimited   0 B         0 B                0        0      0\n",
      table);
}

}  // namespace
}  // namespace strata
