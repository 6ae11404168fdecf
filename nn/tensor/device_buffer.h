// DeviceBuffer: an owned block of device memory (RAII over Device::Allocate / Free), for
// activations and workspaces. Move-only. The owner makes sure no enqueued work still uses the
// buffer when it is destroyed or reset (synchronize first).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "core/status.h"
#include "nn/tensor/tensor.h"
#include "offload/device/api/device.h"

namespace strata::nn {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : device_(std::exchange(o.device_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      device_ = std::exchange(o.device_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  // OutOfMemory (device) naming `what` if the device cannot hold it.
  static Result<DeviceBuffer> Allocate(Device* device, size_t size_bytes, const std::string& what) {
    auto p = device->Allocate(size_bytes == 0 ? 1 : size_bytes);
    if (!p.ok()) return p.status().WithContext(what);
    DeviceBuffer b;
    b.device_ = device;
    b.data_ = *p;
    b.size_ = size_bytes;
    return b;
  }

  void Reset() {
    if (data_ != nullptr) device_->Free(data_).IgnoreError();  // only fails for foreign pointers
    data_ = nullptr;
    size_ = 0;
  }

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t size() const { return size_; }
  Tensor AsTensor(DType dtype, Shape shape) const { return Tensor(data_, dtype, shape); }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata::nn
