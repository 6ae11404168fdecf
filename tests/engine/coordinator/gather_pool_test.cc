// GatherPool (engine/zero/hooks/gather_pool.h): stage 3's gathered-parameter buffers are reused
// across gathers, the stream that takes a buffer waits for its last use (or takes a new one while
// the limit has room), and the pool keeps within its limit (passing it only when every byte is
// held) and gives way when the device is full.
#include "engine/zero/hooks/gather_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

class ParamCoordinatorPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = testing::MakeHostDevice(uint64_t{4} << 20);
    compute_ = device_->CreateStream().value();
    gather_ = device_->CreateStream().value();
  }
  void TearDown() override {
    EXPECT_THAT(device_->DestroyStream(compute_), IsOk());
    EXPECT_THAT(device_->DestroyStream(gather_), IsOk());
  }
  uint64_t InUse() const { return device_->MemoryStats().in_use_bytes; }
  // The compute stream's next operation spins until `go`: what it enqueued after stays pending.
  void HoldCompute(std::atomic<bool>& go) {
    ASSERT_THAT(compute_.LaunchHostFunc([&go]() {
      while (!go.load()) std::this_thread::yield();
      return Status::Ok();
    }),
                IsOk());
  }

  std::unique_ptr<Device> device_;
  Stream compute_, gather_;
};

TEST_F(ParamCoordinatorPoolTest, ReusesAReleasedBufferOfTheSameSize) {
  GatherPool pool(device_.get(), 1 << 20);
  Result<void*> a = pool.Take(4096, gather_, 0);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(pool.Give(*a, 4096, compute_), IsOk());
  EXPECT_EQ(pool.free_bytes(), 4096u);
  ASSERT_THAT(compute_.Synchronize(), IsOk());  // its last use is over
  Result<void*> b = pool.Take(4096, gather_, 0);
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(pool.free_bytes(), 0u);
  EXPECT_EQ(pool.stats().allocations, 1u);
  EXPECT_EQ(pool.stats().reuses, 1u);
  ASSERT_THAT(pool.Give(*b, 4096, compute_), IsOk());
  ASSERT_THAT(compute_.Synchronize(), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, TheTakingStreamWaitsForTheLastUse) {
  // No room for a second buffer: the busy one is reused, after its last use.
  GatherPool pool(device_.get(), 4096);
  void* p = pool.Take(4096, gather_, 0).value();
  std::atomic<bool> go{false}, last_use_done{false}, seen_done{false};
  // The buffer's last reader on the compute stream is held back until `go`.
  ASSERT_THAT(compute_.LaunchHostFunc([&go, &last_use_done]() {
    while (!go.load()) std::this_thread::yield();
    last_use_done.store(true);
    return Status::Ok();
  }),
              IsOk());
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  ASSERT_EQ(pool.Take(4096, gather_, 0).value(), p);
  ASSERT_THAT(gather_.LaunchHostFunc([&last_use_done, &seen_done]() {
    seen_done.store(last_use_done.load());
    return Status::Ok();
  }),
              IsOk());
  go.store(true);
  ASSERT_THAT(gather_.Synchronize(), IsOk());
  ASSERT_THAT(compute_.Synchronize(), IsOk());
  EXPECT_TRUE(seen_done.load()) << "the gather stream wrote the buffer before its last use ended";
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, ABusyBufferIsPassedOverWhileTheLimitHasRoom) {
  GatherPool pool(device_.get(), 1 << 20);
  void* p = pool.Take(4096, gather_, 0).value();
  std::atomic<bool> go{false};
  HoldCompute(go);
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  // The last use is still running: a new buffer, and the gather stream does not wait for it.
  void* q = pool.Take(4096, gather_, 0).value();
  EXPECT_NE(q, p);
  EXPECT_EQ(pool.stats().busy_passed, 1u);
  EXPECT_EQ(pool.stats().reuses, 0u);
  ASSERT_THAT(gather_.Synchronize(), IsOk());  // would hang if it waited for `go`
  go.store(true);
  ASSERT_THAT(compute_.Synchronize(), IsOk());
  ASSERT_THAT(pool.Give(q, 4096, gather_), IsOk());
  ASSERT_THAT(gather_.Synchronize(), IsOk());
  // Both free and idle now: the oldest is reused, nothing new allocated.
  EXPECT_EQ(pool.Take(4096, gather_, 0).value(), p);
  EXPECT_EQ(pool.stats().allocations, 2u);
  EXPECT_EQ(pool.stats().reuses, 1u);
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  ASSERT_THAT(compute_.Synchronize(), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, ABusyBufferIsReusedOnTheStreamOfItsLastUse) {
  GatherPool pool(device_.get(), 1 << 20);
  void* p = pool.Take(4096, compute_, 0).value();
  std::atomic<bool> go{false};
  HoldCompute(go);
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  // Taken for the same stream: its order already puts the new writes after the last use, so
  // the buffer is reused rather than a second one allocated (the persistent regather's case).
  EXPECT_EQ(pool.Take(4096, compute_, 0).value(), p);
  EXPECT_EQ(pool.stats().busy_passed, 0u);
  EXPECT_EQ(pool.stats().allocations, 1u);
  go.store(true);
  ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  ASSERT_THAT(compute_.Synchronize(), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, FreesOtherSizesToStayWithinTheLimit) {
  GatherPool pool(device_.get(), 8192);
  void* a = pool.Take(4096, gather_, 0).value();
  ASSERT_THAT(pool.Give(a, 4096, compute_), IsOk());
  const uint64_t before = InUse();
  // 4096 free + 6144 new would pass 8192: the free buffer goes first.
  void* b = pool.Take(6144, gather_, 0).value();
  EXPECT_EQ(pool.stats().trims, 1u);
  EXPECT_EQ(pool.free_bytes(), 0u);
  EXPECT_LE(InUse(), before - 4096 + 6144 + 256);
  ASSERT_THAT(pool.Give(b, 6144, compute_), IsOk());
  // Every byte held (the caller's 8192): a new buffer passes the limit rather than fail.
  void* c = pool.Take(2048, gather_, 8192).value();
  EXPECT_EQ(pool.stats().trims, 2u);  // the free 6144 went first
  EXPECT_EQ(pool.stats().allocations, 3u);
  ASSERT_THAT(pool.Give(c, 2048, compute_), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, GivesFreeBuffersBackWhenTheDeviceIsFull) {
  GatherPool pool(device_.get(), uint64_t{1} << 40);
  void* a = pool.Take(size_t{3} << 20, gather_, 0).value();
  ASSERT_THAT(pool.Give(a, size_t{3} << 20, compute_), IsOk());
  // 3 MiB free in a 4 MiB device: 2 MiB more fits only once the pool lets go.
  Result<void*> b = pool.Take(size_t{2} << 20, gather_, 0);
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(pool.stats().trims, 1u);
  ASSERT_THAT(pool.Give(*b, size_t{2} << 20, compute_), IsOk());
}

TEST_F(ParamCoordinatorPoolTest, LimitZeroAllocatesAndFreesEveryTime) {
  const uint64_t before = InUse();
  GatherPool pool(device_.get(), 0);
  EXPECT_FALSE(pool.pooling());
  for (int k = 0; k < 3; ++k) {
    void* p = pool.Take(4096, gather_, 0).value();
    ASSERT_THAT(pool.Give(p, 4096, compute_), IsOk());
  }
  ASSERT_THAT(compute_.Synchronize(), IsOk());
  EXPECT_EQ(pool.stats().allocations, 3u);
  EXPECT_EQ(pool.stats().reuses, 0u);
  EXPECT_EQ(pool.free_bytes(), 0u);
  EXPECT_EQ(InUse(), before);
}

TEST_F(ParamCoordinatorPoolTest, DestructionFreesTheFreeBuffers) {
  const uint64_t before = InUse();
  {
    GatherPool pool(device_.get(), 1 << 20);
    for (size_t bytes : {4096, 8192, 4096}) {
      void* p = pool.Take(bytes, gather_, 0).value();
      ASSERT_THAT(pool.Give(p, bytes, compute_), IsOk());
      ASSERT_THAT(compute_.Synchronize(), IsOk());  // idle: the second 4096 reuses the first
    }
    EXPECT_EQ(pool.free_bytes(), 4096u + 8192u);
  }
  EXPECT_EQ(InUse(), before);
}

}  // namespace
}  // namespace strata
