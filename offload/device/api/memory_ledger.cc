#include "offload/device/api/memory_ledger.h"

#include <utility>

#include "core/units.h"

namespace strata::internal {

MemoryLedger::MemoryLedger(uint64_t capacity_bytes, std::string device_name)
    : capacity_(capacity_bytes), device_name_(std::move(device_name)) {}

Status MemoryLedger::Reserve(uint64_t bytes) {
  std::lock_guard lock(mu_);
  const uint64_t free_bytes = capacity_ - stats_.in_use_bytes;  // in_use <= capacity: no underflow
  if (bytes > free_bytes) {
    ++stats_.oom_count;
    return OutOfMemoryError("out of memory on tier device: asked " + FormatBytes(bytes) +
                            ", free " + FormatBytes(free_bytes) + " of " + FormatBytes(capacity_) +
                            " (" + device_name_ + ")");
  }
  stats_.in_use_bytes += bytes;
  return Status::Ok();
}

void MemoryLedger::Commit(void* ptr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  live_[ptr] = bytes;
  ++stats_.alloc_count;
  if (stats_.in_use_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.in_use_bytes;
}

void MemoryLedger::Rollback(uint64_t bytes, bool out_of_memory) {
  std::lock_guard lock(mu_);
  STRATA_CHECK_MSG(bytes <= stats_.in_use_bytes, "MemoryLedger::Rollback of more than reserved");
  stats_.in_use_bytes -= bytes;
  if (out_of_memory) ++stats_.oom_count;
}

Result<uint64_t> MemoryLedger::Take(void* ptr, const char* what) {
  std::lock_guard lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return InvalidArgumentError(std::string(what) +
                                ": pointer is not a live device allocation of " + device_name_ +
                                " (never allocated, or already freed)");
  }
  const uint64_t bytes = it->second;
  live_.erase(it);
  return bytes;
}

void MemoryLedger::Released(uint64_t bytes) {
  std::lock_guard lock(mu_);
  STRATA_CHECK_MSG(bytes <= stats_.in_use_bytes, "MemoryLedger::Released of more than in use");
  stats_.in_use_bytes -= bytes;
  ++stats_.free_count;
}

void MemoryLedger::Restore(void* ptr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  live_[ptr] = bytes;
}

DeviceMemoryStats MemoryLedger::Stats() const {
  std::lock_guard lock(mu_);
  DeviceMemoryStats s = stats_;
  s.capacity_bytes = capacity_;
  s.largest_free_block_bytes = capacity_ - s.in_use_bytes;
  return s;
}

}  // namespace strata::internal
