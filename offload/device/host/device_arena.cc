#include "offload/device/host/device_arena.h"

#include <memory>
#include <string>

#include "core/units.h"

namespace strata::internal {

Result<std::unique_ptr<DeviceArena>> DeviceArena::Create(const Options& options) {
  if (options.capacity_bytes < kAlignment) {
    return InvalidArgumentError("device arena: capacity " + std::to_string(options.capacity_bytes) +
                                " B is below the minimum of " + std::to_string(kAlignment) + " B");
  }
  AlignedBufferOptions buf_opts;
  buf_opts.huge_pages = true;
  buf_opts.populate = options.populate;
  buf_opts.lock = options.lock;
  STRATA_ASSIGN_OR_RETURN(AlignedBuffer buf,
                          AlignedBuffer::Allocate(options.capacity_bytes, buf_opts));
  std::unique_ptr<DeviceArena> arena(new DeviceArena());
  arena->buffer_ = std::move(buf);
  arena->base_ = reinterpret_cast<uintptr_t>(arena->buffer_.data());
  // The cap is the configured size, not the page-rounded mapping.
  arena->capacity_ = options.capacity_bytes / kAlignment * kAlignment;
  arena->InsertFree(0, arena->capacity_);
  arena->stats_.capacity_bytes = arena->capacity_;
  return arena;
}

void DeviceArena::InsertFree(size_t offset, size_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void DeviceArena::EraseFree(std::map<size_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

Result<void*> DeviceArena::Allocate(size_t size_bytes) {
  const size_t want =
      size_bytes == 0 ? kAlignment : (size_bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard lock(mu_);
  auto best = want < size_bytes ? free_by_size_.end()  // overflow
                                : free_by_size_.lower_bound({want, 0});
  if (best == free_by_size_.end()) {
    ++stats_.oom_count;
    const size_t free_bytes = capacity_ - stats_.in_use_bytes;
    const size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    std::string msg = "out of memory on tier device: asked " + FormatBytes(size_bytes) + " (" +
                      std::to_string(size_bytes) + " B), free " + FormatBytes(free_bytes) + " of " +
                      FormatBytes(capacity_) + ", largest free block " + FormatBytes(largest);
    if (free_bytes >= want) msg += " (fragmented)";
    return OutOfMemoryError(std::move(msg));
  }
  const size_t offset = best->second;
  const size_t block = best->first;
  EraseFree(free_by_offset_.find(offset));
  if (block > want) InsertFree(offset + want, block - want);
  live_.emplace(offset, want);
  stats_.in_use_bytes += want;
  if (stats_.in_use_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.in_use_bytes;
  ++stats_.alloc_count;
  return reinterpret_cast<void*>(base_ + offset);
}

Status DeviceArena::Free(void* ptr) {
  if (ptr == nullptr) return Status::Ok();
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  auto live = addr >= base_ ? live_.find(addr - base_) : live_.end();
  if (live == live_.end()) {
    return InvalidArgumentError(
        "device free: pointer is not a live device allocation "
        "(double free or foreign pointer)");
  }
  size_t offset = live->first;
  size_t size = live->second;
  live_.erase(live);
  stats_.in_use_bytes -= size;
  ++stats_.free_count;
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    EraseFree(next);
  }
  auto after = free_by_offset_.lower_bound(offset);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(offset, size);
  return Status::Ok();
}

DeviceMemoryStats DeviceArena::Stats() const {
  std::lock_guard lock(mu_);
  DeviceMemoryStats s = stats_;
  s.largest_free_block_bytes = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  return s;
}

size_t DeviceArena::free_block_count() const {
  std::lock_guard lock(mu_);
  return free_by_offset_.size();
}

}  // namespace strata::internal
