// DeviceArena: HostDevice's "GPU memory" — one fixed host region handed out by a best-fit
// allocator with immediate coalescing, capped at the configured device size.
//
// Being capped is the point: a model that does not fit gets a real OutOfMemory (naming tier
// "device", bytes asked, free, largest free block), so offload paths are exercised on machines
// without a GPU. Thread-safe (one mutex; allocation is not on the engine's hot path: the engine
// allocates its device buffers at start-up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "aio/direct/aligned_buffer.h"
#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata::internal {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;  // like cudaMalloc

  struct Options {
    size_t capacity_bytes = 0;
    bool populate = true;  // touch every page at creation (first touch is slow here)
    bool lock = false;     // mlock the arena (one-line fallback to pageable)
  };
  static Result<std::unique_ptr<DeviceArena>> Create(const Options& options);

  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  Result<void*> Allocate(size_t size_bytes);
  // InvalidArgument if `ptr` is not a live allocation (double free, foreign pointer).
  Status Free(void* ptr);

  // True if [p, p + n) lies inside the arena (not necessarily inside one allocation).
  bool Contains(const void* p, size_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    return a >= base_ && n <= capacity_ && a - base_ <= capacity_ - n;
  }

  DeviceMemoryStats Stats() const;
  size_t free_block_count() const;
  const AlignedBuffer& buffer() const { return buffer_; }

 private:
  DeviceArena() = default;
  void InsertFree(size_t offset, size_t size);
  void EraseFree(std::map<size_t, size_t>::iterator it);

  AlignedBuffer buffer_;
  uintptr_t base_ = 0;
  size_t capacity_ = 0;

  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_offset_;           // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset), for best fit
  std::unordered_map<size_t, size_t> live_;           // offset -> size
  DeviceMemoryStats stats_;
};

}  // namespace strata::internal
