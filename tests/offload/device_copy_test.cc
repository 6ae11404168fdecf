// Copies of random data round-trip exactly on every device, alone and on concurrent streams.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "tests/offload/device_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class DeviceCopyTest : public testing::DeviceTest {};

TEST_P(DeviceCopyTest, RoundTripsRandomDataExactly) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{4096}, (size_t{1} << 20) + 7, size_t{8} << 20}) {
    auto data = testing::RandomBytes(n, testing::TestSeed() + n);
    auto* a = static_cast<uint8_t*>(Alloc(n + 1));
    auto* b = static_cast<uint8_t*>(Alloc(n + 1));
    std::vector<uint8_t> back(n, 0);
    // Odd device offsets on purpose: copies have no alignment requirement.
    ASSERT_TRUE(stream_.CopyAsync(a + 1, data.data(), n, CopyKind::kHostToDevice).ok());
    ASSERT_TRUE(stream_.CopyAsync(b, a + 1, n, CopyKind::kDeviceToDevice).ok());
    ASSERT_TRUE(stream_.CopyAsync(back.data(), b, n, CopyKind::kDeviceToHost).ok());
    ASSERT_TRUE(stream_.Synchronize().ok());
    ASSERT_EQ(0, std::memcmp(data.data(), back.data(), n)) << "size " << n;
    std::vector<uint8_t> host_copy(n);
    ASSERT_TRUE(stream_.CopyAsync(host_copy.data(), back.data(), n, CopyKind::kHostToHost).ok());
    ASSERT_TRUE(stream_.Synchronize().ok());
    ASSERT_EQ(data, host_copy);
  }
}

TEST_P(DeviceCopyTest, ConcurrentStreamsFromManyThreadsRoundTrip) {
  constexpr int kStreams = 4;
  constexpr size_t kBytes = size_t{1} << 20;
  std::vector<std::thread> threads;
  std::vector<Status> results(kStreams);
  std::vector<void*> dev(kStreams);
  for (int s = 0; s < kStreams; ++s) dev[s] = Alloc(kBytes);
  for (int s = 0; s < kStreams; ++s) {
    threads.emplace_back([&, s] {
      auto stream = device_->CreateStream();
      if (!stream.ok()) {
        results[s] = stream.status();
        return;
      }
      for (int iter = 0; iter < 8; ++iter) {
        auto data = testing::RandomBytes(kBytes, testing::TestSeed() + 1000 * s + iter);
        std::vector<uint8_t> back(kBytes);
        Status st = stream->CopyAsync(dev[s], data.data(), kBytes, CopyKind::kHostToDevice);
        if (st.ok()) st = stream->CopyAsync(back.data(), dev[s], kBytes, CopyKind::kDeviceToHost);
        if (st.ok()) st = stream->Synchronize();
        if (st.ok() && data != back) st = DataLossError("round trip mismatch");
        if (!st.ok()) {
          results[s] = st;
          return;
        }
      }
      results[s] = device_->DestroyStream(*stream);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& st : results) EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_P(DeviceCopyTest, ZeroByteCopyIsANoOp) {
  EXPECT_TRUE(stream_.CopyAsync(nullptr, nullptr, 0, CopyKind::kHostToDevice).ok());
  EXPECT_TRUE(stream_.Synchronize().ok());
}

TEST_P(DeviceCopyTest, HostDeviceRejectsCopiesWhoseKindDoesNotMatchThePointers) {
  if (device_->kind() != DeviceKind::kHost) GTEST_SKIP() << "pointer checks are HostDevice's";
  std::vector<uint8_t> host(64);
  void* d = Alloc(64);
  EXPECT_THAT(stream_.CopyAsync(host.data(), host.data(), 64, CopyKind::kHostToDevice),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("H2D copy of 64 B: dst is not device memory")));
  EXPECT_THAT(
      stream_.CopyAsync(d, d, 64, CopyKind::kDeviceToHost),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("D2H copy of 64 B: dst is device memory")));
  EXPECT_THAT(
      stream_.CopyAsync(d, d, 64, CopyKind::kHostToDevice),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("H2D copy of 64 B: src is device memory")));
  EXPECT_THAT(stream_.CopyAsync(d, nullptr, 64, CopyKind::kHostToDevice),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("H2D copy: src is null")));
  EXPECT_THAT(stream_.Synchronize(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DeviceCopyTest,
                         ::testing::ValuesIn(testing::AllDeviceParams()), testing::DeviceParamName);

}  // namespace
}  // namespace strata
