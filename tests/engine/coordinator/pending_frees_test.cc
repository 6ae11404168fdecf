// PendingFrees (engine/zero/hooks/pending_frees.h): stage 3's hooks stay within their memory limits
// by waiting, when a limit would be passed, until the frees they counted are done - and not for the
// work their streams were given after those frees (Note [Frees done already]). Whether a free is
// done is read from the device's own memory accounting; each stream is held by a host function
// that spins until the test lets it go, so "not waited for" is an order, not a time.
#include "engine/zero/hooks/pending_frees.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class PendingFreesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = testing::MakeHostDevice(uint64_t{16} << 20);
    compute_ = device_->CreateStream().value();
    comm_ = device_->CreateStream().value();
  }
  void TearDown() override {
    for (std::atomic<bool>& g : gates_) g.store(true);
    EXPECT_THAT(compute_.Synchronize(), IsOk());
    EXPECT_THAT(comm_.Synchronize(), IsOk());
    EXPECT_THAT(device_->DestroyStream(compute_), IsOk());
    EXPECT_THAT(device_->DestroyStream(comm_), IsOk());
  }
  uint64_t InUse() const { return device_->MemoryStats().in_use_bytes; }
  // The stream's next operation spins until `gate` (one of gates_) opens: what is enqueued after
  // it waits.
  void Hold(const Stream& s, std::atomic<bool>& gate) {
    ASSERT_THAT(s.LaunchHostFunc([&gate]() {
      while (!gate.load()) std::this_thread::yield();
      return Status::Ok();
    }),
                IsOk());
  }
  // Opens `gate` once `returned` is set, or after 30 s: a throttle that waits for the work behind
  // `gate` then fails the test instead of hanging it.
  static std::thread Watchdog(std::atomic<bool>& gate, std::atomic<bool>& returned) {
    return std::thread([&gate, &returned] {
      for (int i = 0; i < 3000 && !returned.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      gate.store(true);
    });
  }
  // A block of `bytes` freed on `s` (stream order) and counted.
  void FreeOn(PendingFrees& pending, const Stream& s, uint64_t bytes) {
    Result<void*> p = device_->Allocate(bytes);
    ASSERT_THAT(p.status(), IsOk());
    ASSERT_THAT(device_->FreeAsync(s, *p), IsOk());
    ASSERT_THAT(pending.Note(s, bytes), IsOk());
  }

  std::unique_ptr<Device> device_;
  Stream compute_, comm_;
  std::atomic<bool> gates_[2] = {false, false};  // opened at the latest by TearDown
};

TEST_F(PendingFreesTest, UnderTheLimitNothingIsWaitedFor) {
  PendingFrees pending(device_.get());
  std::atomic<bool>& gate = gates_[0];
  Hold(compute_, gate);
  FreeOn(pending, compute_, kMiB);
  ASSERT_THAT(pending.Throttle(0, kMiB, 2 * kMiB), IsOk());  // 1 + 1 <= 2 MiB
  EXPECT_EQ(InUse(), kMiB) << "the free cannot have run: its stream is held";
  EXPECT_EQ(pending.bytes(), kMiB);
  ASSERT_THAT(pending.Throttle(0, kMiB, 0), IsOk());  // no limit
  EXPECT_EQ(pending.bytes(), kMiB);
}

TEST_F(PendingFreesTest, OverTheLimitItWaitsForTheFreesButNotForLaterWork) {
  PendingFrees pending(device_.get());
  std::atomic<bool>&before = gates_[0], &after = gates_[1];
  Hold(compute_, before);
  FreeOn(pending, compute_, kMiB);
  Hold(compute_, after);  // work given to the stream after the free
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    before.store(true);
  });
  std::atomic<bool> returned{false};
  std::thread watchdog = Watchdog(after, returned);
  const Status s = pending.Throttle(0, kMiB, kMiB + kMiB / 2);
  const bool later_work_pending = !after.load();
  returned.store(true);
  ASSERT_THAT(s, IsOk());
  opener.join();
  watchdog.join();
  EXPECT_EQ(InUse(), 0u) << "the throttle returned before the free it counted was done";
  EXPECT_TRUE(later_work_pending) << "the throttle waited for the work after the free";
  EXPECT_EQ(pending.bytes(), 0u);
}

TEST_F(PendingFreesTest, FreesAlreadyDoneAreNotWaitedForAgain) {
  PendingFrees pending(device_.get());
  FreeOn(pending, compute_, kMiB);
  ASSERT_THAT(compute_.Synchronize(), IsOk());  // the free is done
  std::atomic<bool>& gate = gates_[0];
  Hold(compute_, gate);  // the stream is busy with later work
  std::atomic<bool> returned{false};
  std::thread watchdog = Watchdog(gate, returned);
  const Status s = pending.Throttle(0, kMiB, kMiB);
  const bool later_work_pending = !gate.load();
  returned.store(true);
  watchdog.join();
  ASSERT_THAT(s, IsOk());
  EXPECT_TRUE(later_work_pending) << "the throttle waited for the work after the free";
  EXPECT_EQ(pending.bytes(), 0u);
}

TEST_F(PendingFreesTest, EachStreamsLastFreeIsWaitedFor) {
  PendingFrees pending(device_.get());
  std::atomic<bool>&comm_gate = gates_[0], &compute_later = gates_[1];
  FreeOn(pending, compute_, kMiB);
  Hold(compute_, compute_later);  // compute: its free done, later work pending
  Hold(comm_, comm_gate);
  FreeOn(pending, comm_, 2 * kMiB);  // comm: its free behind held work
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    comm_gate.store(true);
  });
  std::atomic<bool> returned{false};
  std::thread watchdog = Watchdog(compute_later, returned);
  const Status s = pending.Throttle(kMiB, kMiB, 4 * kMiB);  // 1 + 3 + 1 > 4 MiB
  const bool later_work_pending = !compute_later.load();
  returned.store(true);
  opener.join();
  watchdog.join();
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(InUse(), 0u) << "the comm stream's free was not waited for";
  EXPECT_TRUE(later_work_pending) << "the throttle waited for the compute stream's later work";
  EXPECT_EQ(pending.bytes(), 0u);
}

// Note [Room behind the frees in flight]: two 4 MiB blocks freed on a stream that has not reached
// the frees leave no 8 MiB block; the plain allocation is OutOfMemory, AllocateAfterFrees waits
// for the stream and gets the block the two frees coalesce into. With the room really taken it
// is still OutOfMemory (after the wait), not a hang or a loop.
TEST_F(PendingFreesTest, AnAllocationShortOfABlockWaitsForTheFreesInFlight) {
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    Result<void*> p = device_->Allocate(4 * kMiB);
    ASSERT_THAT(p.status(), IsOk());
    blocks.push_back(*p);
  }
  Hold(compute_, gates_[0]);
  ASSERT_THAT(device_->FreeAsync(compute_, blocks[1]), IsOk());
  ASSERT_THAT(device_->FreeAsync(compute_, blocks[2]), IsOk());
  EXPECT_THAT(device_->Allocate(8 * kMiB).status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("out of memory on tier device")));
  std::thread opener([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gates_[0].store(true);
  });
  Result<void*> got = AllocateAfterFrees(device_.get(), 8 * kMiB, {&compute_, &comm_});
  opener.join();
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(*got, blocks[1]) << "the block the two frees coalesced into";
  EXPECT_EQ(InUse(), 16 * kMiB);
  // Every byte live: the wait finds nothing, and the error is the device's.
  Result<void*> none = AllocateAfterFrees(device_.get(), 4 * kMiB, {&compute_, &comm_});
  EXPECT_THAT(none.status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("out of memory on tier device")));
  for (void* b : {blocks[0], *got, blocks[3]}) ASSERT_THAT(device_->Free(b), IsOk());
}

}  // namespace
}  // namespace strata
