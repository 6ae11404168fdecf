// Stream and Event handles on every device: only a backend mints them (a passkey), a device looks
// ids up in its own tables (a forged, foreign or released id is refused, never dereferenced), a
// destroyed stream is refused (also a second DestroyStream), and concurrent allocations near the
// capacity never over-commit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "tests/offload/device_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

// What a misbehaving backend (or a test) could do with the passkey: mint handles with any id.
// Never instantiated; only its static members are used.
class Forger : public Device {
 public:
  static Stream ForgeStream(Device* device, uint64_t id) { return Stream(HandleKey(), device, id); }
  static Event ForgeEvent(Device* device, uint64_t id) { return Event(HandleKey(), device, id); }
};

TEST(DeviceHandleTest, OnlyABackendCanMintHandles) {
  // Before the passkey any caller could write Stream(device, 12345).
  EXPECT_FALSE((std::is_constructible_v<Stream, Device*, uint64_t>));
  EXPECT_FALSE((std::is_constructible_v<Event, Device*, uint64_t>));
  EXPECT_FALSE((std::is_default_constructible_v<DeviceHandleKey>));
  EXPECT_TRUE((std::is_copy_constructible_v<Stream>));
  EXPECT_FALSE((std::is_copy_constructible_v<Event>));
}

class DeviceHandleTest : public testing::DeviceTest {};

TEST_P(DeviceHandleTest, RefusesAStreamIdItNeverMade) {
  std::vector<char> a(64), b(64);
  // An id past the table, and one that looks like a pointer (what ids used to be).
  for (uint64_t id : {uint64_t{12345}, reinterpret_cast<uint64_t>(a.data())}) {
    const Stream forged = Forger::ForgeStream(device_.get(), id);
    EXPECT_THAT(forged.CopyAsync(a.data(), b.data(), 64, CopyKind::kHostToHost),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("CopyAsync: stream id " + std::to_string(id)),
                               HasSubstr("was not made by"))));
    EXPECT_THAT(forged.LaunchHostFunc([] {}),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("LaunchHostFunc: stream id")));
    EXPECT_THAT(forged.Synchronize(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("StreamSynchronize: stream id")));
    EXPECT_THAT(forged.Query(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("StreamQuery: stream id")));
    EXPECT_THAT(device_->DestroyStream(forged),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("DestroyStream: stream id")));
  }
  EXPECT_THAT(stream_.Synchronize(), IsOk());  // the real stream is untouched
}

TEST_P(DeviceHandleTest, RefusesAnEventIdThatIsNotLive) {
  Result<Event> real = device_->CreateEvent();
  ASSERT_THAT(real, IsOk());
  const uint64_t real_id = real->id();
  {
    Event forged = Forger::ForgeEvent(device_.get(), 999);
    EXPECT_THAT(forged.Record(stream_),
                StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("EventRecord: event id 999"),
                                                             HasSubstr("is not a live event"))));
    EXPECT_THAT(forged.Synchronize(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("EventSynchronize: event id")));
    EXPECT_THAT(stream_.Wait(forged),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("StreamWaitEvent: event id")));
  }                 // its destructor releases id 999, which the device ignores
  *real = Event();  // releases the real one
  Event stale = Forger::ForgeEvent(device_.get(), real_id);
  EXPECT_THAT(stale.Query(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("EventQuery: event id " + std::to_string(real_id))));
  // The released slot is reused by the next event and works.
  Result<Event> next = device_->CreateEvent();
  ASSERT_THAT(next, IsOk());
  EXPECT_THAT(next->Record(stream_), IsOk());
  EXPECT_THAT(next->Synchronize(), IsOk());
}

TEST_P(DeviceHandleTest, RefusesHandlesOfAnotherDevice) {
  HostDeviceOptions o;
  o.memory_bytes = 1 << 20;
  Result<std::unique_ptr<Device>> other = CreateHostDevice(o);
  ASSERT_THAT(other, IsOk());
  Result<Stream> foreign = (*other)->CreateStream();
  ASSERT_THAT(foreign, IsOk());
  std::vector<char> a(64), b(64);
  EXPECT_THAT(device_->CopyAsync(*foreign, a.data(), b.data(), 64, CopyKind::kHostToHost),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("CopyAsync: stream is empty or of another device")));
  EXPECT_THAT(device_->StreamSynchronize(Stream()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("of another device")));
  Result<Event> ev = (*other)->CreateEvent();
  ASSERT_THAT(ev, IsOk());
  EXPECT_THAT(device_->EventRecord(*ev, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("EventRecord: event is empty or of another device")));
}

TEST_P(DeviceHandleTest, RefusesADestroyedStreamIncludingASecondDestroy) {
  Result<Stream> s = device_->CreateStream();
  ASSERT_THAT(s, IsOk());
  std::atomic<int> ran{0};
  ASSERT_THAT(s->LaunchHostFunc([&ran] { ++ran; }), IsOk());
  ASSERT_THAT(device_->DestroyStream(*s), IsOk());  // waits for the work first
  EXPECT_EQ(1, ran.load());
  const std::string id = std::to_string(s->id());
  EXPECT_THAT(device_->DestroyStream(*s), StatusIs(StatusCode::kFailedPrecondition,
                                                   AllOf(HasSubstr("DestroyStream: stream " + id),
                                                         HasSubstr("was destroyed"))));
  EXPECT_THAT(s->LaunchHostFunc([&ran] { ++ran; }),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("LaunchHostFunc: stream " + id)));
  EXPECT_THAT(s->Synchronize(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("was destroyed")));
  Result<Event> ev = device_->CreateEvent();
  ASSERT_THAT(ev, IsOk());
  EXPECT_THAT(ev->Record(*s), StatusIs(StatusCode::kFailedPrecondition, HasSubstr("EventRecord")));
  EXPECT_EQ(1, ran.load());
  EXPECT_THAT(device_->Synchronize(), IsOk());  // covers live streams only
  // Other streams and new ones are unaffected.
  Result<Stream> fresh = device_->CreateStream();
  ASSERT_THAT(fresh, IsOk());
  EXPECT_NE(s->id(), fresh->id());
  EXPECT_THAT(fresh->LaunchHostFunc([&ran] { ++ran; }), IsOk());
  EXPECT_THAT(device_->DestroyStream(*fresh), IsOk());
  EXPECT_EQ(2, ran.load());
}

TEST_P(DeviceHandleTest, DeviceSynchronizeCoversLiveStreamsOnly) {
  Result<Stream> s = device_->CreateStream();
  ASSERT_THAT(s, IsOk());
  ASSERT_THAT(s->LaunchHostFunc([] { return IoError("injected: lost the link"); }), IsOk());
  EXPECT_THAT(device_->DestroyStream(*s),
              StatusIs(StatusCode::kIoError, HasSubstr("injected: lost the link")));
  EXPECT_THAT(device_->Synchronize(), IsOk());  // the failed stream is gone
}

// Many threads allocate and free random sizes on a device a quarter of their combined appetite:
// the bytes granted never pass the capacity, granted blocks never overlap (each thread stamps
// and re-checks its own), and everything adds up at the end.
TEST_P(DeviceHandleTest, ConcurrentAllocationsNearCapacityNeverOverCommit) {
  const DeviceMemoryStats start = device_->MemoryStats();
  const uint64_t capacity = start.capacity_bytes - start.in_use_bytes;
  constexpr int kThreads = 16, kIters = 400;
  constexpr uint64_t kStampStride = 4096;
  std::atomic<uint64_t> granted{0}, max_granted{0}, allocs{0}, ooms{0};
  std::atomic<int> failures{0};
  std::latch go(kThreads), filled(kThreads);
  std::vector<std::thread> threads;
  const bool host_memory = device_->caps().host_accessible_memory;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      // 16 threads x 4 blocks of at least capacity/16: four times what fits.
      std::uniform_int_distribution<uint64_t> size(capacity / 16, capacity / 8);
      std::vector<std::pair<void*, uint64_t>> held;
      auto release = [&] {
        auto [p, n] = held.back();
        held.pop_back();
        if (host_memory) {  // nobody else wrote into this block while we held it
          const auto* bytes = static_cast<const unsigned char*>(p);
          for (uint64_t k = 0; k < n; k += kStampStride) {
            if (bytes[k] != t + 1) ++failures;
          }
          if (bytes[n - 1] != t + 1) ++failures;
        }
        granted.fetch_sub(n);
        if (!device_->Free(p).ok()) ++failures;
      };
      go.arrive_and_wait();
      for (int i = 0; i < kIters; ++i) {
        // The first 4 iterations fill up; everyone then holds its blocks until all have tried,
        // so the capacity is contended whatever the scheduler does. Then random churn.
        if (i == 4) filled.arrive_and_wait();
        if (held.size() < 4 && (i < 4 || rng() % 2 == 0)) {
          const uint64_t n = size(rng);
          Result<void*> p = device_->Allocate(n);
          if (!p.ok()) {
            if (p.status().code() != StatusCode::kOutOfMemory) ++failures;
            ++ooms;
            continue;
          }
          ++allocs;
          const uint64_t now = granted.fetch_add(n) + n;
          uint64_t seen = max_granted.load();
          while (now > seen && !max_granted.compare_exchange_weak(seen, now)) {
          }
          if (host_memory) {  // one stamp per page (a full memset would dominate the test)
            auto* bytes = static_cast<unsigned char*>(*p);
            for (uint64_t k = 0; k < n; k += kStampStride)
              bytes[k] = static_cast<unsigned char>(t + 1);
            bytes[n - 1] = static_cast<unsigned char>(t + 1);
          }
          held.emplace_back(*p, n);
        } else if (!held.empty()) {
          release();
        }
      }
      while (!held.empty()) release();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_LE(max_granted.load(), capacity);
  EXPECT_GT(ooms.load(), 0u);  // the capacity really was contended
  const DeviceMemoryStats end = device_->MemoryStats();
  EXPECT_EQ(start.in_use_bytes, end.in_use_bytes);
  EXPECT_LE(end.peak_bytes, end.capacity_bytes);
  EXPECT_EQ(start.alloc_count + allocs.load(), end.alloc_count);
  EXPECT_EQ(start.free_count + allocs.load(), end.free_count);
  EXPECT_EQ(start.oom_count + ooms.load(), end.oom_count);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DeviceHandleTest,
                         ::testing::ValuesIn(testing::AllDeviceParams()), testing::DeviceParamName);

}  // namespace
}  // namespace strata
