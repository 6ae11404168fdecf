// NvmeOptimizerState's slots by size (Note [Slots by size] in
// engine/nvme/optimizer_nvme_async.cc): the swapper's buffers are one region in which each
// sub-group's state takes its own size, so a large sub-group and several small ones are read ahead
// together where one state per buffer held only buffer_count of them; states placed in every order
// keep the bits of OptimizerState on the CPU tier; and read-ahead copies in the way of a larger
// state are dropped (or, kept, given up once nothing is in flight) and read again, with the same
// bits.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/optimizer_state.h"
#include "tests/engine/nvme/nvme_state_helpers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using nvme_test::CpuTierReference;
using nvme_test::Normal;
using nvme_test::Options;
using nvme_test::SeedBoth;
using nvme_test::StateDiffers;
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

// NvmeOptimizerState on OneLargeFourSmall's five sub-groups and `buffers` buffers, with the CPU
// tier's OptimizerState on the same random state as the reference.
class NvmeSlotsBySizeTest : public ::testing::Test {
 protected:
  void Start(size_t buffers, bool checksums, uint64_t seed, bool write_back = true) {
    ASSERT_NO_FATAL_FAILURE(
        StartOn(OneLargeFourSmall(), 90'000, 5, buffers, checksums, seed, write_back));
  }
  // The same on `layout` cut into sub-groups of sub_group_numel (expected: `groups` of them).
  void StartOn(PartitionLayout layout, size_t sub_group_numel, size_t groups, size_t buffers,
               bool checksums, uint64_t seed, bool write_back = true) {
    layout_ = std::move(layout);
    groups_ = layout_.SubGroups(sub_group_numel);
    ASSERT_EQ(groups_.size(), groups);
    n_ = layout_.partition_numel();
    dir_ = std::make_unique<ScratchDir>();
    ref_ = CpuTierReference(layout_);
    ASSERT_NE(ref_, nullptr);
    NvmeOptimizerStateOptions o = Options(*dir_, buffers, checksums);
    o.write_back = write_back;
    auto nvme = NvmeOptimizerState::Create(layout_, groups_, o, nullptr, nullptr);
    ASSERT_THAT(nvme.status(), IsOk());
    s_ = std::move(nvme).value();
    rng_.seed(TestSeed() + seed);
    ASSERT_THAT(SeedBoth(*ref_, *s_, n_, rng_), IsOk());
  }
  // The same random gradients in both; the reference steps every sub-group; s is ready for the
  // worker's calls.
  void BeginStep(int step) {
    const std::vector<float> g = Normal(n_, rng_, 0.1f);
    std::memcpy(ref_->grad(), g.data(), n_ * 4);
    std::memcpy(s_->grad(), g.data(), n_ * 4);
    for (const SubGroup& sg : groups_) {
      ASSERT_THAT(ref_->StepSubGroup(sg, step, TestHyperparams(), 1.0f, nullptr, DType::kFloat32),
                  IsOk());
    }
    ASSERT_THAT(s_->PrepareSubGroupSteps(), IsOk());
  }
  // The worker's calls for sub-group i: acquire (read if needed), update in place, write back.
  void Update(int i, std::span<const int> keep, int step) {
    auto st = s_->AcquireState(i, keep, true);
    ASSERT_THAT(st.status(), IsOk());
    ASSERT_THAT(s_->UpdateSubGroup(i, step, TestHyperparams(), 1.0f, st->params, st->exp_avg,
                                   st->exp_avg_sq, nullptr, DType::kFloat32),
                IsOk());
    ASSERT_THAT(s_->WriteBack(i), IsOk());
  }
  // `count` sub-groups of 100'000 elements each, `buffers` buffers: the state bytes of each.
  uint64_t StartEqual(size_t count, size_t buffers, uint64_t seed) {
    const std::vector<size_t> numels(count, 100'000);
    StartOn(PartitionLayout::Create(numels, 1, 0, 64).value(), 90'000, count, buffers, true, seed);
    if (HasFatalFailure() || groups_.empty()) return 0;
    const uint64_t one = StateBytes(groups_[0]);
    for (const SubGroup& g : groups_) EXPECT_EQ(StateBytes(g), one);
    return one;
  }
  // The worker's calls for a step in `order`: read ahead for the rest, then update the first.
  void UpdateInOrder(const std::vector<int>& order, int step) {
    for (size_t j = 0; j < order.size(); ++j) {
      const std::span<const int> rest(order.data() + j, order.size() - j);
      bool helps = false;
      ASSERT_THAT(s_->ReadAhead(rest, &helps), IsOk());
      ASSERT_NO_FATAL_FAILURE(Update(rest[0], s_->Window(rest), step));
    }
  }
  // Waits for every read and write in flight.
  void WaitIo() {
    while (true) {
      auto waited = s_->WaitOldestIo(true);
      ASSERT_THAT(waited.status(), IsOk());
      if (!*waited) return;
    }
  }
  uint64_t AllStateBytes() const {
    uint64_t all = 0;
    for (const SubGroup& g : groups_) all += StateBytes(g);
    return all;
  }

  PartitionLayout layout_;
  std::vector<SubGroup> groups_;
  size_t n_ = 0;
  std::unique_ptr<ScratchDir> dir_;
  std::unique_ptr<OptimizerState> ref_;
  std::unique_ptr<NvmeOptimizerState> s_;
  std::mt19937_64 rng_;
};

TEST_F(NvmeSlotsBySizeTest, TwoBuffersReadAheadTheLargeStateAndAllFourSmallOnes) {
  ASSERT_NO_FATAL_FAILURE(Start(2, true, 0));
  ASSERT_THAT(s_->PrepareSubGroupSteps(), IsOk());
  s_->TakeAsyncStats();
  // Two buffers, each for the large state: the large one (7.2 MB) and the four small ones
  // (1.2 MB each) fit side by side, so all five are read ahead at once.
  const std::vector<int> order = {0, 1, 2, 3, 4};
  bool helps = false;
  ASSERT_THAT(s_->ReadAhead(order, &helps), IsOk());
  EXPECT_EQ(s_->Window(order).size(), 5u);
  EXPECT_EQ(s_->TakeAsyncStats().bytes_read, AllStateBytes());
  // Each acquired state lies apart from the others.
  std::vector<std::pair<const float*, const float*>> ranges;
  for (int i = 0; i < 5; ++i) {
    auto st = s_->AcquireState(i, order, true);
    ASSERT_THAT(st.status(), IsOk());
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    ranges.emplace_back(st->params, st->exp_avg_sq + (g.flat_end - g.flat_begin));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "states " << i - 1 << " and " << i;
  }
  EXPECT_EQ(s_->TakeAsyncStats().bytes_read, 0u);  // nothing read twice
  ASSERT_THAT(s_->DrainAsync(), IsOk());
}

// The worker's non-blocking look at the I/O (Note [Ready and resident first] in
// engine/overlap/step_overlap_worker.cc): WaitOldestIo(false) never waits, and says true once the
// oldest I/O has completed (or none is in flight); Resident(i) is true exactly when AcquireState(i)
// reads nothing.
TEST_F(NvmeSlotsBySizeTest, ResidentAndTheNonBlockingWaitFollowTheReadsInFlight) {
  ASSERT_NO_FATAL_FAILURE(Start(2, true, 5));
  ASSERT_THAT(s_->PrepareSubGroupSteps(), IsOk());
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  s_->TakeAsyncStats();
  Result<bool> idle = s_->WaitOldestIo(false);
  ASSERT_THAT(idle.status(), IsOk());
  EXPECT_TRUE(*idle);  // nothing in flight
  for (int i = -1; i <= 5; ++i) EXPECT_FALSE(s_->Resident(i)) << i;
  const std::vector<int> order = {4, 3, 2, 1, 0};
  bool helps = false;
  ASSERT_THAT(s_->ReadAhead(order, &helps), IsOk());
  EXPECT_EQ(s_->TakeAsyncStats().bytes_read, AllStateBytes());
  // Record the reads as they complete, without blocking: at most one per completed call.
  int recorded = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (recorded < 5 && std::chrono::steady_clock::now() < deadline) {
    Result<bool> done = s_->WaitOldestIo(false);
    ASSERT_THAT(done.status(), IsOk());
    if (*done) {
      ++recorded;
    } else {
      std::this_thread::yield();
    }
  }
  EXPECT_EQ(recorded, 5);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s_->Resident(i)) << i;
  EXPECT_FALSE(s_->Resident(5));
  // Resident means no read: acquiring every state (checksums verified by the updates) reads
  // nothing more, and the updates keep the CPU tier's bits.
  ASSERT_NO_FATAL_FAILURE(BeginStep(1));
  for (int i : order) ASSERT_NO_FATAL_FAILURE(Update(i, order, 1));
  EXPECT_EQ(s_->TakeAsyncStats().bytes_read, 0u);
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
}

// Write-back (Note [Write-back] in engine/nvme/optimizer_nvme_async.cc): with buffers for every
// state, the steps after the first read nothing and write nothing - the updated states stay in the
// buffers, dirty - until a drain writes them, after which NVMe holds the CPU tier's bits.
TEST_F(NvmeSlotsBySizeTest, WriteBackLeavesUpdatedStatesInTheBuffersUntilADrain) {
  ASSERT_NO_FATAL_FAILURE(Start(2, true, 11));
  const std::vector<int> order = {4, 3, 2, 1, 0};
  for (int step = 1; step <= 3; ++step) {
    ASSERT_NO_FATAL_FAILURE(BeginStep(step));
    s_->TakeAsyncStats();
    for (size_t j = 0; j < order.size(); ++j) {
      const std::span<const int> rest(order.data() + j, order.size() - j);
      bool helps = false;
      ASSERT_THAT(s_->ReadAhead(rest, &helps), IsOk());
      ASSERT_NO_FATAL_FAILURE(Update(rest[0], s_->Window(rest), step));
    }
    const NvmeOptimizerState::AsyncStats st = s_->TakeAsyncStats();
    EXPECT_EQ(st.bytes_read, step == 1 ? AllStateBytes() : 0u) << "step " << step;
    EXPECT_EQ(st.bytes_written, 0u) << "step " << step;
    EXPECT_EQ(s_->dirty_bytes(), AllStateBytes()) << "step " << step;
    // Synchronize's call: writes in flight settle, the dirty copies stay.
    ASSERT_THAT(s_->SettleWrites(), IsOk());
    EXPECT_EQ(s_->dirty_bytes(), AllStateBytes()) << "step " << step;
  }
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  EXPECT_EQ(s_->TakeAsyncStats().bytes_written, AllStateBytes());
  EXPECT_EQ(s_->dirty_bytes(), 0u);
  EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");  // read back from NVMe
}

// Write-through (write_back false) writes every state every step; write-back writes what the
// room needs (here, with one buffer and the large state in every step, most of it). Both keep
// the CPU tier's bits after every step.
TEST_F(NvmeSlotsBySizeTest, WriteBackAndWriteThroughKeepTheBitsAndWriteBackWritesNoMore) {
  uint64_t written[2] = {0, 0};
  for (const bool write_back : {false, true}) {
    SCOPED_TRACE(write_back ? "write-back" : "write-through");
    ASSERT_NO_FATAL_FAILURE(Start(1, true, 13, write_back));
    const std::vector<std::vector<int>> orders = {
        {1, 2, 3, 4, 0}, {0, 4, 3, 2, 1}, {2, 1, 0, 4, 3}};
    for (size_t k = 0; k < orders.size(); ++k) {
      const int step = static_cast<int>(k) + 1;
      ASSERT_NO_FATAL_FAILURE(BeginStep(step));
      s_->TakeAsyncStats();
      const std::vector<int>& order = orders[k];
      for (size_t j = 0; j < order.size(); ++j) {
        const std::span<const int> rest(order.data() + j, order.size() - j);
        bool helps = false;
        ASSERT_THAT(s_->ReadAhead(rest, &helps), IsOk());
        ASSERT_NO_FATAL_FAILURE(Update(rest[0], s_->Window(rest), step));
      }
      const uint64_t w = s_->TakeAsyncStats().bytes_written;
      if (!write_back) {
        EXPECT_EQ(w, AllStateBytes()) << "step " << step;
      }
      written[write_back ? 1 : 0] += w;
      ASSERT_EQ(StateDiffers(*s_, *ref_, n_), "") << "step " << step;  // drains: all written
    }
  }
  EXPECT_LE(written[1], written[0]);
}

// Steps through the overlapped worker's calls in several orders (the large sub-group first,
// last, between): states placed at free ranges and written back while others are read. Bits
// against the CPU tier after each step.
TEST_F(NvmeSlotsBySizeTest, EveryOrderKeepsTheCpuTiersBits) {
  for (const bool checksums : {true, false}) {
    SCOPED_TRACE(checksums ? "checksums" : "no checksums");
    ASSERT_NO_FATAL_FAILURE(Start(2, checksums, checksums ? 1 : 0));
    const std::vector<std::vector<int>> orders = {
        {4, 3, 2, 1, 0}, {0, 1, 2, 3, 4}, {2, 0, 4, 1, 3}, {1, 3, 0, 2, 4}, {4, 0, 3, 1, 2}};
    for (size_t k = 0; k < orders.size(); ++k) {
      const int step = static_cast<int>(k) + 1;
      ASSERT_NO_FATAL_FAILURE(BeginStep(step));
      const std::vector<int>& order = orders[k];
      for (size_t j = 0; j < order.size(); ++j) {
        const std::span<const int> rest(order.data() + j, order.size() - j);
        bool helps = false;
        ASSERT_THAT(s_->ReadAhead(rest, &helps), IsOk());
        const auto window = s_->Window(rest);
        const std::span<const int> keep(window.data(), std::min<size_t>(2, window.size()));
        ASSERT_NO_FATAL_FAILURE(Update(rest[0], keep, step));
      }
      ASSERT_EQ(StateDiffers(*s_, *ref_, n_), "") << "step " << step;
    }
  }
}

// One buffer (8 MiB: the large state, or the four small ones, not both): the small states read
// ahead are valid copies in the way of the large one. Not kept, they are dropped (only as many as
// it needs); kept, they are given up once nothing is in flight, those needed last first. Either
// way they are read again, and the bits still equal the CPU tier's.
TEST_F(NvmeSlotsBySizeTest, OneBufferDropsReadAheadCopiesForTheLargeStateAndKeepsTheBits) {
  for (const bool keep_them : {false, true}) {
    SCOPED_TRACE(keep_them ? "kept" : "not kept");
    ASSERT_NO_FATAL_FAILURE(Start(1, true, keep_them ? 7 : 5));
    ASSERT_NO_FATAL_FAILURE(BeginStep(1));
    s_->TakeAsyncStats();
    const std::vector<int> small = {1, 2, 3, 4};
    bool helps = false;
    ASSERT_THAT(s_->ReadAhead(small, &helps), IsOk());
    ASSERT_EQ(s_->Window(small).size(), 4u);
    ASSERT_NO_FATAL_FAILURE(
        Update(0, keep_them ? std::span<const int>(small) : std::span<const int>(), 1));
    for (const int i : small) ASSERT_NO_FATAL_FAILURE(Update(i, std::span<const int>(&i, 1), 1));
    // Every state once, and the small ones that stood in the large one's way again.
    EXPECT_GT(s_->TakeAsyncStats().bytes_read, AllStateBytes());
    EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
  }
}

// Resident states stay (Note [Resident states stay] in engine/nvme/optimizer_nvme_read_ahead.cc):
// six equal sub-groups, three buffers (room for three states), every step in the backward's order
// (the last sub-group first) with the worker's calls. A step starts with the three states the
// last one updated last still in the buffers; it reads the three it lacks, and the first one it
// needs takes the room of the state it needs last, which it then reads again: 6 - 3 + 1 = 4
// states read and 4 written a step, never all six. Before, the first read-ahead of a step wrote
// out the states the last step left and read them back at the end: six of each a step.
TEST_F(NvmeSlotsBySizeTest, StatesLeftInTheBuffersAreNotReadAgainByTheNextStep) {
  uint64_t one = 0;
  ASSERT_NO_FATAL_FAILURE(one = StartEqual(6, 3, 17));
  const std::vector<int> order = {5, 4, 3, 2, 1, 0};
  for (int step = 1; step <= 4; ++step) {
    ASSERT_NO_FATAL_FAILURE(BeginStep(step));
    s_->TakeAsyncStats();
    ASSERT_NO_FATAL_FAILURE(UpdateInOrder(order, step));
    const NvmeOptimizerState::AsyncStats st = s_->TakeAsyncStats();
    if (step == 1) {  // nothing in the buffers yet; three states stay dirty
      EXPECT_EQ(st.bytes_read, 6 * one);
      EXPECT_EQ(st.bytes_written, 3 * one);
    } else {
      EXPECT_EQ(st.bytes_read, 4 * one) << "step " << step;
      EXPECT_EQ(st.bytes_written, 4 * one) << "step " << step;
    }
    EXPECT_EQ(s_->dirty_bytes(), 3 * one) << "step " << step;
    ASSERT_THAT(s_->SettleWrites(), IsOk());
  }
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
}

// Note [Room to read ahead]: with the state four times the buffers or more and the buffers full
// of states wanted last (those a step updated last, as a forward's deferred updates in flat order
// find them), two states' room is left for the next reads: the first two sub-groups are read ahead
// before any update. Keeping every resident state, only the first one was.
TEST_F(NvmeSlotsBySizeTest, ResidentStatesLeaveRoomToReadTwoAheadWhenTheStateIsLarge) {
  ASSERT_NO_FATAL_FAILURE(StartEqual(20, 4, 23));
  ASSERT_NO_FATAL_FAILURE(BeginStep(1));
  bool helps = false;
  const std::vector<int> last = {16, 17, 18, 19};
  for (int round = 0; round < 16; ++round) {
    ASSERT_THAT(s_->ReadAhead(last, &helps), IsOk());
    ASSERT_THAT(s_->WaitOldestIo(true).status(), IsOk());
  }
  for (const int i : last) ASSERT_TRUE(s_->Resident(i)) << i;
  std::vector<int> order(20);
  for (int i = 0; i < 20; ++i) order[static_cast<size_t>(i)] = i;
  for (int round = 0; round < 16 && !(s_->Resident(0) && s_->Resident(1)); ++round) {
    ASSERT_THAT(s_->ReadAhead(order, &helps), IsOk());
    ASSERT_THAT(s_->WaitOldestIo(true).status(), IsOk());
  }
  EXPECT_TRUE(s_->Resident(0));
  EXPECT_TRUE(s_->Resident(1));
  ASSERT_NO_FATAL_FAILURE(UpdateInOrder(order, 1));  // the updates keep the CPU tier's bits
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
}

// Note [Rooms together]: with the buffers full of states updated last step (dirty, not in the
// window), one read-ahead starts the writes that make room for both states it reads ahead, and
// once those are done the next one reads both. Making one room per call wrote one state here.
TEST_F(NvmeSlotsBySizeTest, OneReadAheadMakesTheRoomOfEveryStateItReadsAhead) {
  const uint64_t one = StartEqual(20, 4, 29);
  ASSERT_NO_FATAL_FAILURE(BeginStep(1));
  std::vector<int> order(20);
  for (int i = 0; i < 20; ++i) order[static_cast<size_t>(i)] = i;
  ASSERT_NO_FATAL_FAILURE(UpdateInOrder(order, 1));
  ASSERT_NO_FATAL_FAILURE(WaitIo());
  // The last step's states fill the buffers, written back only when their room is needed.
  ASSERT_EQ(s_->dirty_bytes(), 4 * one);
  ASSERT_NO_FATAL_FAILURE(BeginStep(2));
  s_->TakeAsyncStats();
  bool helps = false;
  ASSERT_THAT(s_->ReadAhead(order, &helps), IsOk());
  EXPECT_TRUE(helps);
  NvmeOptimizerState::AsyncStats st = s_->TakeAsyncStats();
  EXPECT_EQ(st.bytes_written, 2 * one);  // the rooms of states 0 and 1
  EXPECT_EQ(st.bytes_read, 0u);
  ASSERT_NO_FATAL_FAILURE(WaitIo());
  ASSERT_THAT(s_->ReadAhead(order, &helps), IsOk());
  st = s_->TakeAsyncStats();
  EXPECT_EQ(st.bytes_read, 2 * one);  // both reads in flight together
  EXPECT_EQ(st.bytes_written, 0u);
  ASSERT_NO_FATAL_FAILURE(UpdateInOrder(order, 2));  // the same bits as the CPU tier
  ASSERT_THAT(s_->DrainAsync(), IsOk());
  EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
}

// Note [The forward's states stay]: with keep_first (deferred updates) and the buffers holding
// five of eight equal states, the first three sub-groups (the buffers less two states' room) stay
// in the buffers through every step, and the other five stream through the two rooms left: each
// read once and written once a step, in the order wanted. The order is the engine's cycle (a
// forward's deferred updates of 0, 1, 2, then a backward's 7 down to 3), wanted across the step's
// end as the overlapped step's worker wants it. Without keep_first, the same cycle reads the
// first sub-groups again.
TEST_F(NvmeSlotsBySizeTest, KeepFirstKeepsTheFirstStatesAndStreamsTheOthers) {
  for (const bool keep_first : {true, false}) {
    SCOPED_TRACE(keep_first ? "keep_first" : "without keep_first");
    uint64_t one = 0;
    ASSERT_NO_FATAL_FAILURE(one = StartEqual(8, 5, 31));
    s_->set_keep_first(keep_first);
    const std::vector<int> order = {0, 1, 2, 7, 6, 5, 4, 3};
    bool first_read_again = false;
    for (int step = 1; step <= 5; ++step) {
      ASSERT_NO_FATAL_FAILURE(BeginStep(step));
      if (step > 1) {
        for (const int i : {0, 1, 2}) first_read_again |= !s_->Resident(i);
      }
      s_->TakeAsyncStats();
      for (size_t j = 0; j < order.size(); ++j) {
        std::vector<int> wanted(order.begin() + static_cast<std::ptrdiff_t>(j), order.end());
        wanted.insert(wanted.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(j));
        bool helps = false;
        ASSERT_THAT(s_->ReadAhead(wanted, &helps), IsOk());
        const std::vector<int> window = s_->Window(wanted);
        if (keep_first) {
          // The three first sub-groups, then the first two others in the order wanted.
          std::vector<int> expected;
          for (const int w : wanted) {
            if (w <= 2) expected.push_back(w);
          }
          for (const int w : wanted) {
            if (w > 2 && expected.size() < 5) expected.push_back(w);
          }
          ASSERT_EQ(window, expected) << "step " << step << ", update " << j;
        }
        ASSERT_NO_FATAL_FAILURE(Update(order[j], window, step));
      }
      const NvmeOptimizerState::AsyncStats st = s_->TakeAsyncStats();
      if (keep_first && step > 1) {
        EXPECT_EQ(st.bytes_read, 5 * one) << "step " << step;
        EXPECT_EQ(st.bytes_written, 5 * one) << "step " << step;
      }
      ASSERT_THAT(s_->SettleWrites(), IsOk());
    }
    EXPECT_EQ(first_read_again, !keep_first);
    ASSERT_THAT(s_->DrainAsync(), IsOk());
    EXPECT_EQ(StateDiffers(*s_, *ref_, n_), "");
  }
}

}  // namespace
}  // namespace strata
