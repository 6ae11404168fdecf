// NvmeOptimizerState's slots by size (Note [Slots by size] in engine/optimizer_nvme_async.cc):
// the swapper's buffers are one region in which each sub-group's state takes its own size, so a
// large sub-group and several small ones are read ahead together where one state per buffer held
// only buffer_count of them; states placed in every order keep the bits of OptimizerState on the
// CPU tier; and read-ahead copies in the way of a larger state are dropped (or, kept, given up
// once nothing is in flight) and read again, with the same bits.
#include <algorithm>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/optimizer_nvme.h"
#include "engine/optimizer_state.h"
#include "tests/engine/nvme/nvme_state_helpers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using nvme_test::Normal;
using nvme_test::Options;
using nvme_test::TestHyperparams;
using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::TestSeed;

// One large parameter and four small ones, each its own sub-group (each reaches the size).
PartitionLayout OneLargeFourSmall() {
  const std::vector<size_t> numels = {600'000, 100'000, 100'001, 99'999, 100'000};
  return PartitionLayout::Create(numels, 1, 0, 64).value();
}

// The bytes a sub-group's state moves: three parts, each 4 KiB aligned (small sub-groups).
uint64_t StateBytes(const SubGroup& g) {
  return 3 * ((uint64_t{g.flat_end - g.flat_begin} * 4 + 4095) / 4096 * 4096);
}

TEST(NvmeSlotsBySizeTest, TwoBuffersReadAheadTheLargeStateAndAllFourSmallOnes) {
  ScratchDir dir;
  const PartitionLayout layout = OneLargeFourSmall();
  const std::vector<SubGroup> groups = layout.SubGroups(90'000);
  ASSERT_EQ(groups.size(), 5u);
  auto nvme = NvmeOptimizerState::Create(layout, groups, Options(dir, 2, true), nullptr, nullptr);
  ASSERT_THAT(nvme.status(), IsOk());
  NvmeOptimizerState& s = **nvme;
  const size_t n = layout.partition_numel();
  std::mt19937_64 rng(TestSeed());
  ASSERT_THAT(s.WriteState(0, Normal(n, rng, 1), Normal(n, rng, 0.1f), Normal(n, rng, 0.01f, true)),
              IsOk());
  ASSERT_THAT(s.Flush(), IsOk());
  ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
  s.TakeAsyncStats();

  // Two buffers, each for the large state: the large one (7.2 MB) and the four small ones
  // (1.2 MB each) fit side by side, so all five are read ahead at once.
  const std::vector<int> order = {0, 1, 2, 3, 4};
  bool helps = false;
  ASSERT_THAT(s.ReadAhead(order, &helps), IsOk());
  EXPECT_EQ(s.Window(order).size(), 5u);
  uint64_t all = 0;
  for (const SubGroup& g : groups) all += StateBytes(g);
  EXPECT_EQ(s.TakeAsyncStats().bytes_read, all);
  // Each acquired state lies apart from the others.
  std::vector<std::pair<const float*, const float*>> ranges;
  for (int i = 0; i < 5; ++i) {
    auto st = s.AcquireState(i, order, true);
    ASSERT_THAT(st.status(), IsOk());
    const size_t numel =
        groups[static_cast<size_t>(i)].flat_end - groups[static_cast<size_t>(i)].flat_begin;
    ranges.emplace_back(st->params, st->exp_avg_sq + numel);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "states " << i - 1 << " and " << i;
  }
  EXPECT_EQ(s.TakeAsyncStats().bytes_read, 0u);  // nothing read twice
  ASSERT_THAT(s.DrainAsync(), IsOk());
}

// Steps through the overlapped worker's calls in several orders (the large sub-group first,
// last, between): states placed at free ranges and written back while others are read. Bits
// against the CPU tier after each step.
TEST(NvmeSlotsBySizeTest, EveryOrderKeepsTheCpuTiersBits) {
  for (const bool checksums : {true, false}) {
    SCOPED_TRACE(checksums ? "checksums" : "no checksums");
    ScratchDir dir;
    const PartitionLayout layout = OneLargeFourSmall();
    const std::vector<SubGroup> groups = layout.SubGroups(90'000);
    const size_t n = layout.partition_numel();
    OptimizerStateOptions ro;
    ro.hyperparams = TestHyperparams();
    ro.tier = Tier::kCpu;
    ro.pin_memory = false;
    auto ref = OptimizerState::Create(layout, ro, nullptr, nullptr);
    ASSERT_THAT(ref.status(), IsOk());
    auto nvme =
        NvmeOptimizerState::Create(layout, groups, Options(dir, 2, checksums), nullptr, nullptr);
    ASSERT_THAT(nvme.status(), IsOk());
    NvmeOptimizerState& s = **nvme;
    std::mt19937_64 rng(TestSeed() + (checksums ? 1 : 0));
    const std::vector<float> p = Normal(n, rng, 1), m = Normal(n, rng, 0.1f),
                             v = Normal(n, rng, 0.01f, true);
    std::memcpy((*ref)->master(), p.data(), n * 4);
    std::memcpy((*ref)->exp_avg(), m.data(), n * 4);
    std::memcpy((*ref)->exp_avg_sq(), v.data(), n * 4);
    ASSERT_THAT(s.WriteState(0, p, m, v), IsOk());
    ASSERT_THAT(s.Flush(), IsOk());
    const std::vector<std::vector<int>> orders = {
        {4, 3, 2, 1, 0}, {0, 1, 2, 3, 4}, {2, 0, 4, 1, 3}, {1, 3, 0, 2, 4}, {4, 0, 3, 1, 2}};
    for (size_t k = 0; k < orders.size(); ++k) {
      const int step = static_cast<int>(k) + 1;
      const std::vector<float> g = Normal(n, rng, 0.1f);
      std::memcpy((*ref)->grad(), g.data(), n * 4);
      std::memcpy(s.grad(), g.data(), n * 4);
      const Hyperparams hp = TestHyperparams();
      for (const SubGroup& sg : groups) {
        ASSERT_THAT((*ref)->StepSubGroup(sg, step, hp, 1.0f, nullptr, DType::kFloat32), IsOk());
      }
      ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
      const std::vector<int>& order = orders[k];
      for (size_t j = 0; j < order.size(); ++j) {
        const std::span<const int> rest(order.data() + j, order.size() - j);
        bool helps = false;
        ASSERT_THAT(s.ReadAhead(rest, &helps), IsOk());
        const std::span<const int> keep = s.Window(rest).first(std::min<size_t>(2, rest.size()));
        auto st = s.AcquireState(rest[0], keep, true);
        ASSERT_THAT(st.status(), IsOk());
        ASSERT_THAT(s.UpdateSubGroup(rest[0], step, hp, 1.0f, st->params, st->exp_avg,
                                     st->exp_avg_sq, nullptr, DType::kFloat32),
                    IsOk());
        ASSERT_THAT(s.WriteBack(rest[0]), IsOk());
      }
      std::vector<float> bp(n), bm(n), bv(n);
      ASSERT_THAT(s.ReadState(0, n, bp.data(), bm.data(), bv.data()), IsOk());
      ASSERT_EQ(0, std::memcmp(bp.data(), (*ref)->master(), n * 4)) << "master, step " << step;
      ASSERT_EQ(0, std::memcmp(bm.data(), (*ref)->exp_avg(), n * 4)) << "exp_avg, step " << step;
      ASSERT_EQ(0, std::memcmp(bv.data(), (*ref)->exp_avg_sq(), n * 4))
          << "exp_avg_sq, step " << step;
    }
  }
}

// One buffer (8 MiB: the large state, or the four small ones, not both): the small states read
// ahead are valid copies in the way of the large one. Not kept, they are dropped (only as many as
// it needs); kept, they are given up once nothing is in flight, those needed last first. Either
// way they are read again, and the bits still equal the CPU tier's.
TEST(NvmeSlotsBySizeTest, OneBufferDropsReadAheadCopiesForTheLargeStateAndKeepsTheBits) {
  for (const bool keep_them : {false, true}) {
    SCOPED_TRACE(keep_them ? "kept" : "not kept");
    ScratchDir dir;
    const PartitionLayout layout = OneLargeFourSmall();
    const std::vector<SubGroup> groups = layout.SubGroups(90'000);
    const size_t n = layout.partition_numel();
    OptimizerStateOptions ro;
    ro.hyperparams = TestHyperparams();
    ro.tier = Tier::kCpu;
    ro.pin_memory = false;
    auto ref = OptimizerState::Create(layout, ro, nullptr, nullptr);
    ASSERT_THAT(ref.status(), IsOk());
    auto nvme = NvmeOptimizerState::Create(layout, groups, Options(dir, 1, true), nullptr, nullptr);
    ASSERT_THAT(nvme.status(), IsOk());
    NvmeOptimizerState& s = **nvme;
    std::mt19937_64 rng(TestSeed() + (keep_them ? 7 : 5));
    const std::vector<float> p = Normal(n, rng, 1), m = Normal(n, rng, 0.1f),
                             v = Normal(n, rng, 0.01f, true);
    std::memcpy((*ref)->master(), p.data(), n * 4);
    std::memcpy((*ref)->exp_avg(), m.data(), n * 4);
    std::memcpy((*ref)->exp_avg_sq(), v.data(), n * 4);
    ASSERT_THAT(s.WriteState(0, p, m, v), IsOk());
    ASSERT_THAT(s.Flush(), IsOk());
    const std::vector<float> g = Normal(n, rng, 0.1f);
    std::memcpy((*ref)->grad(), g.data(), n * 4);
    std::memcpy(s.grad(), g.data(), n * 4);
    const Hyperparams hp = TestHyperparams();
    for (const SubGroup& sg : groups) {
      ASSERT_THAT((*ref)->StepSubGroup(sg, 1, hp, 1.0f, nullptr, DType::kFloat32), IsOk());
    }
    ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
    s.TakeAsyncStats();

    const std::vector<int> small = {1, 2, 3, 4};
    bool helps = false;
    ASSERT_THAT(s.ReadAhead(small, &helps), IsOk());
    ASSERT_EQ(s.Window(small).size(), 4u);
    const std::vector<int> none;
    auto big = s.AcquireState(
        0, keep_them ? std::span<const int>(small) : std::span<const int>(none), true);
    ASSERT_THAT(big.status(), IsOk());
    ASSERT_THAT(s.UpdateSubGroup(0, 1, hp, 1.0f, big->params, big->exp_avg, big->exp_avg_sq,
                                 nullptr, DType::kFloat32),
                IsOk());
    ASSERT_THAT(s.WriteBack(0), IsOk());
    for (const int i : small) {
      auto st = s.AcquireState(i, std::span<const int>(&i, 1), true);
      ASSERT_THAT(st.status(), IsOk());
      ASSERT_THAT(s.UpdateSubGroup(i, 1, hp, 1.0f, st->params, st->exp_avg, st->exp_avg_sq, nullptr,
                                   DType::kFloat32),
                  IsOk());
      ASSERT_THAT(s.WriteBack(i), IsOk());
    }
    uint64_t all = 0;
    for (const SubGroup& sg : groups) all += StateBytes(sg);
    // Every state once, and the small ones that stood in the large one's way again.
    EXPECT_GT(s.TakeAsyncStats().bytes_read, all);
    std::vector<float> bp(n), bm(n), bv(n);
    ASSERT_THAT(s.ReadState(0, n, bp.data(), bm.data(), bv.data()), IsOk());
    EXPECT_EQ(0, std::memcmp(bp.data(), (*ref)->master(), n * 4)) << "master";
    EXPECT_EQ(0, std::memcmp(bm.data(), (*ref)->exp_avg(), n * 4)) << "exp_avg";
    EXPECT_EQ(0, std::memcmp(bv.data(), (*ref)->exp_avg_sq(), n * 4)) << "exp_avg_sq";
  }
}

}  // namespace
}  // namespace strata
