#include "swap/buffer_arena.h"

#include <algorithm>

#include "core/units.h"

namespace strata {

BufferArena::BufferArena(uint8_t* base, size_t size_bytes) : base_(base), size_(size_bytes) {
  if (size_ > 0) free_[0] = size_;
}

size_t BufferArena::largest_free() const {
  size_t m = 0;
  for (auto [off, n] : free_) m = std::max(m, n);
  return m;
}

Result<uint8_t*> BufferArena::Allocate(size_t size_bytes) {
  const size_t n = (std::max<size_t>(size_bytes, 1) + 4095) / 4096 * 4096;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    size_t off = it->first, left = it->second - n;
    free_.erase(it);
    if (left) free_[off + n] = left;
    live_[off] = n;
    used_ += n;
    peak_ = std::max(peak_, used_);
    return base_ + off;
  }
  return OutOfMemoryError("cpu: swap buffers full: need " + FormatBytes(n) + ", " +
                          FormatBytes(size_ - used_) + " free of " + FormatBytes(size_) +
                          " (largest free range " + FormatBytes(largest_free()) + ")");
}

void BufferArena::Free(uint8_t* p) {
  auto it = live_.find(static_cast<size_t>(p - base_));
  if (it == live_.end()) return;
  size_t off = it->first, n = it->second;
  live_.erase(it);
  used_ -= n;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + n == next->first) {
    n += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += n;
      return;
    }
  }
  free_[off] = n;
}

}  // namespace strata
