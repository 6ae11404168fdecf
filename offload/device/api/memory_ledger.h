// MemoryLedger: the bookkeeping of a device allocator whose memory comes from somewhere else (a
// CUDA memory pool): a capacity cap, the live allocations and their sizes, and c10-style
// statistics (in use, peak, allocations, frees, OOMs).
//
// Allocation is reserve first, allocate, then commit or roll back, so the cap holds under any
// number of concurrent callers (two threads can never both pass the check and over-commit, and
// `capacity - in_use` never underflows):
//
//   STRATA_RETURN_IF_ERROR(ledger.Reserve(n));     // counted now, under the lock
//   void* p = backend_alloc(n);                     // no lock held
//   if (!p) { ledger.Rollback(n, oom); ... } else { ledger.Commit(p, n); }
//
// Freeing mirrors it: Take(p) removes the allocation (a second Take of p fails), the backend
// frees, then Released(n) or, if the backend refused, Restore(p, n).
//
// Thread-safe (one mutex; allocation is not on the engine's hot path). Kept apart from CudaDevice
// so this logic is tested on machines without a GPU (tests/offload/memory_ledger_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata::internal {

class MemoryLedger {
 public:
  // `device_name` appears in OutOfMemory messages.
  MemoryLedger(uint64_t capacity_bytes, std::string device_name);
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Counts `bytes` as in use, or OutOfMemory naming tier device, the bytes asked, free and the
  // capacity (and counts an OOM); nothing is counted on failure.
  Status Reserve(uint64_t bytes);
  // The allocation for a Reserve(bytes) succeeded at `ptr`: it becomes live.
  void Commit(void* ptr, uint64_t bytes);
  // The allocation for a Reserve(bytes) failed: the bytes are returned; `out_of_memory` counts an
  // OOM (the backend's own memory ran out before the cap).
  void Rollback(uint64_t bytes, bool out_of_memory);

  // Removes the live allocation at `ptr` and returns its size; its bytes stay counted until
  // Released or Restore. InvalidArgument "<what>: ... not a live device allocation" otherwise
  // (never allocated, already freed, or being freed by another thread).
  Result<uint64_t> Take(void* ptr, const char* what);
  // The backend freed a Take-n allocation.
  void Released(uint64_t bytes);
  // The backend refused to free it: it is live again.
  void Restore(void* ptr, uint64_t bytes);

  uint64_t capacity_bytes() const { return capacity_; }
  // largest_free_block_bytes is capacity - in use (a pool hides its fragmentation).
  DeviceMemoryStats Stats() const;

 private:
  const uint64_t capacity_;
  const std::string device_name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, uint64_t> live_;
  DeviceMemoryStats stats_;  // in_use_bytes <= capacity_ always
};

}  // namespace strata::internal
