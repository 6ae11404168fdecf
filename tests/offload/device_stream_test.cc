// Streams and events on every device: in-order execution, cross-stream event waits under load,
// event query/synchronize/elapsed time, and how errors from async work reach the waiter.
// Labelled `threaded`: CI also runs it under ThreadSanitizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "tests/offload/device_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class DeviceStreamTest : public testing::DeviceTest {
 protected:
  Event NewEvent(bool timing = true) {
    auto e = device_->CreateEvent(EventOptions{timing});
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : Event();
  }
  Stream NewStream() {
    auto s = device_->CreateStream();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : Stream();
  }
};

// Releases a host task that blocks its stream, so tests can observe "not yet complete".
struct Latch {
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

TEST_P(DeviceStreamTest, RunsWorkInEnqueueOrder) {
  std::vector<int> order;  // touched only by the stream's tasks, read after Synchronize
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(stream_.LaunchHostFunc([&order, i] { order.push_back(i); }).ok());
  }
  ASSERT_TRUE(stream_.Synchronize().ok());
  ASSERT_EQ(5000u, order.size());
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(i, order[i]);
}

TEST_P(DeviceStreamTest, KeepsEachThreadsOrderWhenThreadsShareAStream) {
  constexpr int kThreads = 4, kOps = 2000;
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        EXPECT_TRUE(stream_.LaunchHostFunc([&seen, t, i] { seen[t].push_back(i); }).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(stream_.Synchronize().ok());
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(static_cast<size_t>(kOps), seen[t].size());
    for (int i = 0; i < kOps; ++i) ASSERT_EQ(i, seen[t][i]);
  }
}

TEST_P(DeviceStreamTest, CrossStreamEventWaitsOrderProducerAndConsumerUnderLoad) {
  // Producer: H2D copy of fresh data into a slot, record; consumer: wait, D2D to a second slot,
  // then D2H and a host task that checks it. Slots are reused only after the consumer's event.
  constexpr int kSlots = 4, kIters = 200;
  constexpr size_t kBytes = 64 << 10;
  Stream producer = NewStream(), consumer = NewStream();
  std::vector<void*> in(kSlots), out(kSlots);
  std::vector<std::vector<uint8_t>> src(kSlots), dst(kSlots, std::vector<uint8_t>(kBytes));
  std::vector<Event> produced, consumed;
  for (int s = 0; s < kSlots; ++s) {
    in[s] = Alloc(kBytes);
    out[s] = Alloc(kBytes);
    produced.push_back(NewEvent(false));
    consumed.push_back(NewEvent(false));
  }
  std::atomic<int> mismatches{0};
  std::mt19937 rng(static_cast<uint32_t>(testing::TestSeed()));
  for (int it = 0; it < kIters; ++it) {
    const int s = it % kSlots;
    // Host buffers may be rewritten only once the consumer finished with this slot.
    ASSERT_TRUE(consumed[s].Synchronize().ok());
    src[s] = testing::RandomBytes(kBytes, testing::TestSeed() + it);
    ASSERT_TRUE(producer.Wait(consumed[s]).ok());
    const int spin = static_cast<int>(rng() % 200);
    ASSERT_TRUE(producer
                    .LaunchHostFunc([spin] {
                      volatile int x = 0;  // uneven producer work
                      for (int k = 0; k < spin * 100; ++k) x = x + k;
                    })
                    .ok());
    ASSERT_TRUE(producer.CopyAsync(in[s], src[s].data(), kBytes, CopyKind::kHostToDevice).ok());
    ASSERT_TRUE(produced[s].Record(producer).ok());
    ASSERT_TRUE(consumer.Wait(produced[s]).ok());
    ASSERT_TRUE(consumer.CopyAsync(out[s], in[s], kBytes, CopyKind::kDeviceToDevice).ok());
    ASSERT_TRUE(consumer.CopyAsync(dst[s].data(), out[s], kBytes, CopyKind::kDeviceToHost).ok());
    const std::vector<uint8_t>* want = &src[s];
    const std::vector<uint8_t>* got = &dst[s];
    ASSERT_TRUE(consumer
                    .LaunchHostFunc([want, got, &mismatches] {
                      if (*want != *got) mismatches.fetch_add(1);
                    })
                    .ok());
    ASSERT_TRUE(consumed[s].Record(consumer).ok());
  }
  ASSERT_TRUE(consumer.Synchronize().ok());
  ASSERT_TRUE(producer.Synchronize().ok());
  EXPECT_EQ(0, mismatches.load());
  EXPECT_TRUE(device_->DestroyStream(producer).ok());
  EXPECT_TRUE(device_->DestroyStream(consumer).ok());
}

TEST_P(DeviceStreamTest, EventsReportCompletionAndElapsedTime) {
  Event never = NewEvent();
  EXPECT_TRUE(*never.Query());  // never recorded: complete
  EXPECT_TRUE(never.Synchronize().ok());
  EXPECT_TRUE(stream_.Wait(never).ok());

  Latch latch;
  Event start = NewEvent(), end = NewEvent();
  ASSERT_TRUE(start.Record(stream_).ok());
  ASSERT_TRUE(stream_.LaunchHostFunc([&latch] { latch.Wait(); }).ok());
  ASSERT_TRUE(
      stream_.LaunchHostFunc([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); })
          .ok());
  ASSERT_TRUE(end.Record(stream_).ok());
  auto pending = end.Query();
  ASSERT_TRUE(pending.ok());
  EXPECT_FALSE(*pending);
  EXPECT_THAT(Event::ElapsedMs(start, end),
              StatusIs(StatusCode::kUnavailable, HasSubstr("EventElapsedMs")));
  EXPECT_FALSE(*stream_.Query());
  latch.Open();
  ASSERT_TRUE(end.Synchronize().ok());
  EXPECT_TRUE(*end.Query());
  auto ms = Event::ElapsedMs(start, end);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 2.0f);  // the 2 ms sleep lies between the two records

  Event untimed = NewEvent(false);
  ASSERT_TRUE(untimed.Record(stream_).ok());
  ASSERT_TRUE(untimed.Synchronize().ok());
  EXPECT_THAT(
      Event::ElapsedMs(start, untimed),
      StatusIs(StatusCode::kFailedPrecondition, HasSubstr("EventElapsedMs: event has timing off")));
}

TEST_P(DeviceStreamTest, WaitUsesThePointRecordedAtTheTimeOfTheCall) {
  Stream other = NewStream();
  Latch first, second;
  Event e = NewEvent(false);
  ASSERT_TRUE(other.LaunchHostFunc([&first] { first.Wait(); }).ok());
  ASSERT_TRUE(e.Record(other).ok());
  ASSERT_TRUE(stream_.Wait(e).ok());  // waits for the first record only
  ASSERT_TRUE(other.LaunchHostFunc([&second] { second.Wait(); }).ok());
  ASSERT_TRUE(e.Record(other).ok());  // re-record: later point
  std::atomic<bool> ran{false};
  ASSERT_TRUE(stream_.LaunchHostFunc([&ran] { ran = true; }).ok());
  first.Open();
  ASSERT_TRUE(stream_.Synchronize().ok());  // must not need `second`
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(*e.Query());
  second.Open();
  EXPECT_TRUE(e.Synchronize().ok());
  EXPECT_TRUE(device_->DestroyStream(other).ok());
}

TEST_P(DeviceStreamTest, HostTaskErrorReachesStreamAndLaterEvents) {
  Event before = NewEvent(false), after = NewEvent(false);
  ASSERT_TRUE(before.Record(stream_).ok());
  ASSERT_TRUE(stream_.LaunchHostFunc([] { return IoError("injected: disk on fire"); }).ok());
  ASSERT_TRUE(after.Record(stream_).ok());
  const auto injected = StatusIs(StatusCode::kIoError, HasSubstr("injected: disk on fire"));
  EXPECT_THAT(stream_.Synchronize(), injected);
  EXPECT_THAT(stream_.Synchronize(), injected);  // sticky
  EXPECT_THAT(before.Synchronize(), IsOk());
  EXPECT_THAT(after.Synchronize(), injected);
  EXPECT_THAT(after.Query(), injected);
}

TEST_P(DeviceStreamTest, HostDeviceSkipsWorkAfterAFailureAndPropagatesItThroughWaits) {
  if (device_->kind() != DeviceKind::kHost) GTEST_SKIP() << "skip/propagate is HostDevice's";
  Stream waiter = NewStream();
  Event after = NewEvent(false);
  std::atomic<bool> later_ran{false}, waiter_ran{false};
  ASSERT_TRUE(stream_.LaunchHostFunc([] { return InternalError("injected"); }).ok());
  ASSERT_TRUE(stream_.LaunchHostFunc([&] { later_ran = true; }).ok());
  ASSERT_TRUE(after.Record(stream_).ok());
  ASSERT_TRUE(waiter.Wait(after).ok());
  ASSERT_TRUE(waiter.LaunchHostFunc([&] { waiter_ran = true; }).ok());
  EXPECT_THAT(waiter.Synchronize(),
              StatusIs(StatusCode::kInternal,
                       AllOf(HasSubstr("waiting on an event"), HasSubstr("injected"))));
  EXPECT_FALSE(later_ran.load());
  EXPECT_FALSE(waiter_ran.load());
  EXPECT_THAT(device_->DestroyStream(waiter),
              StatusIs(StatusCode::kInternal, HasSubstr("waiting on an event")));
  EXPECT_THAT(waiter.LaunchHostFunc([] {}),  // destroyed: refuses work
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("was destroyed")));
}

TEST_P(DeviceStreamTest, FreeAsyncReleasesAfterEarlierWork) {
  const auto before = device_->MemoryStats();
  void* p = *device_->Allocate(4096);
  Latch latch;
  ASSERT_TRUE(stream_.LaunchHostFunc([&latch] { latch.Wait(); }).ok());
  ASSERT_TRUE(device_->FreeAsync(stream_, p).ok());
  latch.Open();
  ASSERT_TRUE(stream_.Synchronize().ok());
  const auto after = device_->MemoryStats();
  EXPECT_EQ(before.in_use_bytes, after.in_use_bytes);
  EXPECT_EQ(before.free_count + 1, after.free_count);
}

// Each host stream's thread carries its stream's index in its name (strata-strm-<index>), so
// per-thread CPU accounting (top -H, /proc/<pid>/task/*/comm, bench/overlap's
// cpu_seconds.overlapped_by_thread) tells the streams apart.
TEST_P(DeviceStreamTest, HostStreamThreadIsNamedByItsIndex) {
  if (GetParam() == testing::DeviceParam::kCuda)
    GTEST_SKIP() << "host funcs run on a CUDA driver thread";
  Stream other = NewStream();
  for (const Stream& s : {stream_, other}) {
    char name[16] = {};
    ASSERT_TRUE(
        s.LaunchHostFunc([&name] { pthread_getname_np(pthread_self(), name, sizeof(name)); }).ok());
    ASSERT_TRUE(s.Synchronize().ok());
    EXPECT_EQ(std::string(name), "strata-strm-" + std::to_string(s.id()));
  }
  ASSERT_TRUE(device_->DestroyStream(other).ok());
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DeviceStreamTest,
                         ::testing::ValuesIn(testing::AllDeviceParams()), testing::DeviceParamName);

}  // namespace
}  // namespace strata
