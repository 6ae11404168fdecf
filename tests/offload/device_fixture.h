// A parameterised fixture that runs the same test on every device this build has: "host",
// "host_throttled" (HostDevice with a paced link, to exercise the pacing path) and "cuda" (skips
// with the reason when there is no GPU), plus helpers to move test data in and out.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "offload/device/registry.h"

namespace strata::testing {

enum class DeviceParam { kHost, kHostThrottled, kCuda };

inline std::string DeviceParamName(const ::testing::TestParamInfo<DeviceParam>& info) {
  switch (info.param) {
    case DeviceParam::kHost:
      return "host";
    case DeviceParam::kHostThrottled:
      return "host_throttled";
    case DeviceParam::kCuda:
      return "cuda";
  }
  return "unknown";
}

inline std::vector<DeviceParam> AllDeviceParams() {
  return {DeviceParam::kHost, DeviceParam::kHostThrottled, DeviceParam::kCuda};
}

class DeviceTest : public ::testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.host.memory_bytes = size_t{64} << 20;
    if (GetParam() == DeviceParam::kHostThrottled) {
      options.host.link_bandwidth_gbps = 50;  // fast enough to keep the tests quick
      options.host.device_bandwidth_gbps = 200;
    }
    if (GetParam() == DeviceParam::kCuda) {
      options.kind = DeviceKind::kCuda;
      if (!DeviceKindBuilt(DeviceKind::kCuda)) {
        GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (STRATA_WITH_CUDA off)";
      }
    }
    auto device = CreateDevice(options);
    if (GetParam() == DeviceParam::kCuda && !device.ok()) {
      GTEST_SKIP() << device.status().message();  // "no CUDA device: ..."
    }
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    auto stream = device_->CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = *stream;
  }

  void TearDown() override {
    for (void* p : allocations_) EXPECT_TRUE(device_->Free(p).ok());
  }

  // Device memory freed at TearDown.
  void* Alloc(size_t bytes) {
    auto p = device_->Allocate(bytes);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return nullptr;
    allocations_.push_back(*p);
    return *p;
  }

  template <typename T>
  T* Upload(const std::vector<T>& host) {
    auto* d = static_cast<T*>(Alloc(std::max<size_t>(1, host.size() * sizeof(T))));
    EXPECT_TRUE(
        stream_.CopyAsync(d, host.data(), host.size() * sizeof(T), CopyKind::kHostToDevice).ok());
    return d;
  }

  template <typename T>
  std::vector<T> Download(const T* d, size_t n) {
    std::vector<T> host(n);
    Status s = stream_.CopyAsync(host.data(), d, n * sizeof(T), CopyKind::kDeviceToHost);
    EXPECT_TRUE(s.ok()) << s.ToString();
    s = stream_.Synchronize();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return host;
  }

  std::unique_ptr<Device> device_;
  Stream stream_;
  std::vector<void*> allocations_;
};

}  // namespace strata::testing
