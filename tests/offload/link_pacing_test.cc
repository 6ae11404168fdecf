// The host device's paced link (offload/device/host/link_pacer.h, Note [Pacing without drift]):
// a copy takes its link time from when it can start — after the stream's previous op, including
// a kernel or host function and a wait for another stream's event — not from when it was
// enqueued. Lower bounds only (a copy may always take longer on a loaded machine): each test
// checks that the link time was not hidden behind the op before it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "offload/device/registry.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kLinkGbps = 1.0;           // 1 GB/s: a 4 MB copy takes 4 ms on the link
constexpr size_t kBytes = size_t{4} << 20;  // 4 MiB
constexpr auto kHold = std::chrono::milliseconds(30);
constexpr double kHoldMs = 30;

double LinkMs(size_t bytes) { return static_cast<double>(bytes) / (kLinkGbps * 1e9) * 1e3; }

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class LinkPacingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.host.memory_bytes = size_t{64} << 20;
    options.host.link_bandwidth_gbps = kLinkGbps;
    auto device = CreateDevice(options);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    auto d = device_->Allocate(kBytes);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dev_ = *d;
    host_.assign(kBytes, 0x5a);
  }
  void TearDown() override {
    if (dev_ != nullptr) {
      EXPECT_TRUE(device_->Free(dev_).ok());
    }
  }
  Stream NewStream() {
    auto s = device_->CreateStream();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : Stream();
  }

  std::unique_ptr<Device> device_;
  void* dev_ = nullptr;
  std::vector<uint8_t> host_;
};

TEST_F(LinkPacingTest, CopyBehindAWaitForAnotherStreamsEventTakesItsLinkTimeAfterTheEvent) {
  Stream producer = NewStream(), consumer = NewStream();
  auto event = device_->CreateEvent(EventOptions{false});
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(producer.LaunchHostFunc([] { std::this_thread::sleep_for(kHold); }).ok());
  ASSERT_TRUE(event->Record(producer).ok());
  ASSERT_TRUE(consumer.Wait(*event).ok());
  ASSERT_TRUE(consumer.CopyAsync(host_.data(), dev_, kBytes, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(consumer.Synchronize().ok());
  // The copy could start only when the event fired (>= kHold after t0); it then needs the link.
  EXPECT_GE(MsSince(t0), kHoldMs + LinkMs(kBytes));
  ASSERT_TRUE(producer.Synchronize().ok());
}

TEST_F(LinkPacingTest, CopyBehindAHostFunctionOnItsStreamTakesItsLinkTimeAfterIt) {
  Stream s = NewStream();
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(s.LaunchHostFunc([] { std::this_thread::sleep_for(kHold); }).ok());
  ASSERT_TRUE(s.CopyAsync(dev_, host_.data(), kBytes, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_GE(MsSince(t0), kHoldMs + LinkMs(kBytes));
}

TEST_F(LinkPacingTest, BackToBackCopiesShareTheLinkOneAfterAnother) {
  Stream a = NewStream(), b = NewStream();
  std::vector<uint8_t> other(kBytes, 0x11);
  const Clock::time_point t0 = Clock::now();
  // Two H2D copies per stream on one direction of the link: four link times in all.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(a.CopyAsync(dev_, host_.data(), kBytes, CopyKind::kHostToDevice).ok());
    ASSERT_TRUE(b.CopyAsync(dev_, other.data(), kBytes, CopyKind::kHostToDevice).ok());
  }
  ASSERT_TRUE(a.Synchronize().ok());
  ASSERT_TRUE(b.Synchronize().ok());
  EXPECT_GE(MsSince(t0), 4 * LinkMs(kBytes));
}

}  // namespace
}  // namespace strata
