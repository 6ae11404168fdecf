// Shared helpers for the nn/ and Llama tests: a HostDevice with a stream, upload/download of
// test vectors, seeded random data, and a central-difference gradient check in double.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nn/modules/layers/module.h"
#include "offload/device/host/host_device.h"

namespace strata::testing {

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostDeviceOptions o;
    o.memory_bytes = size_t{256} << 20;
    o.populate_memory = false;
    auto d = CreateHostDevice(o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = std::move(d).value();
    auto s = device_->CreateStream();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_ = *s;
  }
  void TearDown() override {
    if (device_ == nullptr) return;
    // Error tests leave the stream failed on purpose; its work is done either way.
    stream_.Synchronize().IgnoreError();
    for (void* p : allocs_) EXPECT_TRUE(device_->Free(p).ok());
  }

  nn::RunContext Ctx() const { return nn::RunContext{device_.get(), stream_, true}; }

  template <typename T>
  T* Up(const std::vector<T>& v) {
    auto p = device_->Allocate(std::max<size_t>(4, v.size() * sizeof(T)));
    EXPECT_TRUE(p.ok());
    allocs_.push_back(*p);
    EXPECT_TRUE(
        stream_.CopyAsync(*p, v.data(), v.size() * sizeof(T), CopyKind::kHostToDevice).ok());
    EXPECT_TRUE(stream_.Synchronize().ok());
    return static_cast<T*>(*p);
  }
  template <typename T>
  std::vector<T> Down(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(stream_.CopyAsync(v.data(), p, n * sizeof(T), CopyKind::kDeviceToHost).ok());
    Status s = stream_.Synchronize();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return v;
  }

  std::unique_ptr<Device> device_;
  Stream stream_;
  std::vector<void*> allocs_;
};

inline std::vector<float> RandomVector(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

inline std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Checks analytic[i] against the central difference of `loss` (a double function of `x`) at
// every index, with step h, within atol + rtol * |fd|.
inline void ExpectGradientMatchesFiniteDifferences(
    const std::string& what, std::vector<double> x,
    const std::function<double(const std::vector<double>&)>& loss,
    const std::vector<float>& analytic, double atol = 2e-4, double rtol = 2e-3, double h = 1e-4) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(x);
    x[i] = x0 - h;
    const double lm = loss(x);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    if (std::abs(analytic[i] - fd) > atol + rtol * std::abs(fd) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " vs finite "
                    << "difference " << fd;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << x.size() << " entries off";
}

inline void ExpectNear(const std::string& what, const std::vector<float>& got,
                       const std::vector<double>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i]) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs reference " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " entries off";
}

}  // namespace strata::testing
