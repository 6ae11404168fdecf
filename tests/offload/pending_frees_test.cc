// PendingFrees (offload/device/pending_frees.h): a wait for room returns once the oldest frees
// are back, leaving later queued work running; frees done on another stream out of order are
// dropped without a wait; a failed stream's error reaches the waiter. Checked against the
// device's own memory statistics and the streams' progress. Labelled `threaded` (TSan in CI).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "offload/device/pending_frees.h"
#include "tests/offload/device_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using testing::IsOk;
using testing::StatusHasCode;

// Blocks a stream's host task until opened.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  }
};

class PendingFreesTest : public testing::DeviceTest {
 protected:
  void* Alloc(size_t bytes) {
    Result<void*> p = device_->Allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : nullptr;
  }
  Stream NewStream() {
    Result<Stream> s = device_->CreateStream();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : Stream();
  }
};

// Two frees queued behind two gates on one stream; room for the second's bytes needs only the
// first back: the wait returns with the first's memory returned while the second gate is shut.
TEST_P(PendingFreesTest, WaitsForTheOldestFreesOnlyUntilTheRestFit) {
  if (GetParam() == testing::DeviceParam::kCuda) GTEST_SKIP() << "host streams only";
  const uint64_t base = device_->MemoryStats().in_use_bytes;
  Gate first, second;
  std::atomic<bool> second_ran{false};
  void* a = Alloc(1 << 20);
  void* b = Alloc(2 << 20);
  PendingFrees pending(device_.get());
  ASSERT_THAT(stream_.LaunchHostFunc([&] { first.Wait(); }), IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, a), IsOk());
  ASSERT_THAT(pending.Add(stream_, 1 << 20), IsOk());
  ASSERT_THAT(stream_.LaunchHostFunc([&] {
    second.Wait();
    second_ran = true;
  }),
              IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, b), IsOk());
  ASSERT_THAT(pending.Add(stream_, 2 << 20), IsOk());
  EXPECT_EQ(pending.bytes(), uint64_t{3} << 20);
  EXPECT_EQ(device_->MemoryStats().in_use_bytes, base + (uint64_t{3} << 20));

  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    first.Open();
  });
  ASSERT_THAT(pending.WaitUntilAtMost(2 << 20), IsOk());
  opener.join();
  EXPECT_EQ(pending.bytes(), uint64_t{2} << 20);
  EXPECT_EQ(pending.waits(), 1u);
  EXPECT_EQ(device_->MemoryStats().in_use_bytes, base + (uint64_t{2} << 20))
      << "the first free's memory is back once the wait returns";
  EXPECT_FALSE(second_ran) << "the later work stays queued behind its gate";

  second.Open();
  ASSERT_THAT(pending.WaitUntilAtMost(0), IsOk());
  EXPECT_EQ(pending.bytes(), 0u);
  EXPECT_TRUE(second_ran);
  EXPECT_EQ(device_->MemoryStats().in_use_bytes, base);
}

// Under the limit already: no wait at all, even with frees pending behind a shut gate.
TEST_P(PendingFreesTest, DoesNotWaitWhenThePendingBytesFit) {
  if (GetParam() == testing::DeviceParam::kCuda) GTEST_SKIP() << "host streams only";
  Gate gate;
  void* a = Alloc(4096);
  PendingFrees pending(device_.get());
  ASSERT_THAT(stream_.LaunchHostFunc([&] { gate.Wait(); }), IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, a), IsOk());
  ASSERT_THAT(pending.Add(stream_, 4096), IsOk());
  ASSERT_THAT(pending.WaitUntilAtMost(4096), IsOk());
  EXPECT_EQ(pending.bytes(), 4096u);
  EXPECT_EQ(pending.waits(), 0u);
  gate.Open();
  ASSERT_THAT(stream_.Synchronize(), IsOk());
}

// The older free sits behind a shut gate on one stream, the newer one is done on another: the
// done one is dropped without a wait, and that is enough room.
TEST_P(PendingFreesTest, DropsFreesDoneOutOfOrderWithoutWaiting) {
  if (GetParam() == testing::DeviceParam::kCuda) GTEST_SKIP() << "host streams only";
  Stream other = NewStream();
  Gate gate;
  void* a = Alloc(1 << 20);
  void* b = Alloc(1 << 20);
  PendingFrees pending(device_.get());
  ASSERT_THAT(stream_.LaunchHostFunc([&] { gate.Wait(); }), IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, a), IsOk());
  ASSERT_THAT(pending.Add(stream_, 1 << 20), IsOk());
  ASSERT_THAT(device_->FreeAsync(other, b), IsOk());
  ASSERT_THAT(pending.Add(other, 1 << 20), IsOk());
  ASSERT_THAT(other.Synchronize(), IsOk());
  ASSERT_THAT(pending.WaitUntilAtMost(1 << 20), IsOk());
  EXPECT_EQ(pending.bytes(), uint64_t{1} << 20);
  EXPECT_EQ(pending.waits(), 0u);
  gate.Open();
  ASSERT_THAT(pending.WaitUntilAtMost(0), IsOk());
  EXPECT_EQ(pending.bytes(), 0u);
  ASSERT_THAT(device_->DestroyStream(other), IsOk());
}

// A stream whose work failed: the waiter gets its error, and the free no longer counts.
TEST_P(PendingFreesTest, AFailedStreamsErrorReachesTheWaiter) {
  if (GetParam() == testing::DeviceParam::kCuda) GTEST_SKIP() << "host streams only";
  void* a = Alloc(4096);
  PendingFrees pending(device_.get());
  ASSERT_THAT(stream_.LaunchHostFunc([] { return InternalError("the copy failed"); }), IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, a), IsOk());
  ASSERT_THAT(pending.Add(stream_, 4096), IsOk());
  EXPECT_THAT(pending.WaitUntilAtMost(0), StatusHasCode(StatusCode::kInternal));
  EXPECT_EQ(pending.bytes(), 0u);
  EXPECT_THAT(stream_.Synchronize(), StatusHasCode(StatusCode::kInternal));
}

// The device's memory is held by a buffer freed behind a shut gate: the allocation is refused
// at first, waits for the stream and then succeeds; without any free queued it stays refused.
TEST_P(PendingFreesTest, AllocateWaitsForQueuedFreesWhenTheDeviceRefuses) {
  if (GetParam() == testing::DeviceParam::kCuda) GTEST_SKIP() << "host streams only";
  const uint64_t room = device_->MemoryStats().capacity_bytes - device_->MemoryStats().in_use_bytes;
  const size_t big = static_cast<size_t>(room * 3 / 4 / 4096 * 4096);
  void* held = Alloc(big);
  ASSERT_NE(held, nullptr);
  PendingFrees pending(device_.get());
  EXPECT_THAT(device_->Allocate(big).status(), StatusHasCode(StatusCode::kOutOfMemory));
  Gate gate;
  ASSERT_THAT(stream_.LaunchHostFunc([&] { gate.Wait(); }), IsOk());
  ASSERT_THAT(device_->FreeAsync(stream_, held), IsOk());  // not counted: the stream is drained
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.Open();
  });
  const Stream streams[] = {stream_, Stream()};  // an invalid handle is skipped
  Result<void*> got = pending.Allocate(big, streams);
  opener.join();
  ASSERT_THAT(got.status(), IsOk());
  Result<void*> again = pending.Allocate(big, streams);
  EXPECT_THAT(again.status(), StatusHasCode(StatusCode::kOutOfMemory));
  ASSERT_THAT(device_->Free(*got), IsOk());
}

INSTANTIATE_TEST_SUITE_P(AllDevices, PendingFreesTest,
                         ::testing::ValuesIn(testing::AllDeviceParams()), testing::DeviceParamName);

}  // namespace
}  // namespace strata
