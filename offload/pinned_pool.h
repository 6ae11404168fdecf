// PinnedPool: a fixed set of equal, page-locked, O_DIRECT-aligned host buffers, allocated once at
// start-up and leased out again and again (no allocation on the hot path).
//
// The pool is one slab: 2 MiB-aligned transparent huge pages (AlignedBuffer), bound to the NUMA
// node of the creating thread with hwloc before first touch, then page-locked — registered with
// the device (cudaHostRegister) when it needs that for DMA, else mlock. If the lock limit refuses,
// one line says so and the pool stays usable as pageable memory (locked() tells which). The slab
// is charged to Tier::kCpu of an optional TierBudget for the pool's lifetime.
//
// Thread-safe: any thread may acquire and release buffers. A lease (PinnedBuffer) must be
// returned before the pool is destroyed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "aio/direct/aligned_buffer.h"
#include "core/status.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"

namespace strata {

struct PinnedPoolOptions {
  // Size of each buffer, rounded up to 4 KiB (O_DIRECT); buffers of 2 MiB or more are rounded
  // to 2 MiB so each starts on a huge page.
  size_t buffer_bytes = size_t{1} << 20;
  size_t buffer_count = 4;
  // Page-lock the slab (see above). false: plain pageable memory.
  bool lock = true;
  // If set and device->caps().host_registration, the slab is registered with it instead of
  // mlocked. Must outlive the pool.
  Device* device = nullptr;
  // If set, the slab is reserved on Tier::kCpu (OutOfMemory from Create if over the limit).
  TierBudget* budget = nullptr;
  // NUMA node to bind to; -1 = the node of the thread calling Create.
  int numa_node = -1;
  // Used in messages: "optimizer swap buffers".
  std::string name = "pinned pool";
};

struct PinnedPoolStats {
  uint64_t acquire_count = 0;  // leases handed out
  uint64_t wait_count = 0;     // acquisitions that had to wait for a free buffer
  size_t in_use = 0;
  size_t peak_in_use = 0;
};

class PinnedPool;

// A leased buffer; returns itself to the pool on destruction. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : pool_(std::exchange(o.pool_, nullptr)), data_(o.data_), size_(o.size_), index_(o.index_) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Release(); }

  void* data() const { return data_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  size_t index() const { return index_; }  // slot in the pool, stable across leases
  explicit operator bool() const { return pool_ != nullptr; }
  // Returns the buffer to the pool now (idempotent).
  void Release();

 private:
  friend class PinnedPool;
  PinnedBuffer(PinnedPool* pool, void* data, size_t size, size_t index)
      : pool_(pool), data_(data), size_(size), index_(index) {}
  PinnedPool* pool_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t index_ = 0;
};

class PinnedPool {
 public:
  enum class LockMode { kPageable, kMlocked, kDeviceRegistered };

  // Allocates, binds, touches and locks the whole slab. InvalidArgument for zero sizes;
  // OutOfMemory (cpu) if the budget or the OS refuses.
  static Result<std::unique_ptr<PinnedPool>> Create(const PinnedPoolOptions& options);
  // Unlocks/unregisters and frees the slab. All leases must have been returned (STRATA_CHECK).
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // Blocks until a buffer is free.
  PinnedBuffer Acquire();
  // Unavailable at once if every buffer is leased.
  Result<PinnedBuffer> TryAcquire();
  // Unavailable if none frees up within `timeout`.
  Result<PinnedBuffer> AcquireFor(std::chrono::milliseconds timeout);

  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t buffer_count() const { return count_; }
  size_t free_count() const;
  LockMode lock_mode() const { return lock_mode_; }
  bool locked() const { return lock_mode_ != LockMode::kPageable; }
  int numa_node() const { return numa_node_; }
  const void* slab() const { return slab_.data(); }
  PinnedPoolStats Stats() const;
  // "pinned pool: 4 x 1 MiB, mlocked, NUMA node 0 (bound), 2 MiB-aligned, 100% on transparent
  // huge pages" (reads /proc/self/smaps: for reports, not hot paths).
  std::string Describe() const;

 private:
  friend class PinnedBuffer;
  explicit PinnedPool(const PinnedPoolOptions& options) : options_(options) {}
  Status Init();
  std::string HugePages() const;
  void Return(size_t index);
  PinnedBuffer Lease();  // requires mu_ and a free buffer

  const PinnedPoolOptions options_;
  AlignedBuffer slab_;
  TierReservation reservation_;
  size_t buffer_bytes_ = 0;
  size_t count_ = 0;
  LockMode lock_mode_ = LockMode::kPageable;
  int numa_node_ = 0;
  bool numa_bound_ = false;

  mutable std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<size_t> free_;  // stack of free slot indices; capacity fixed at Create
  PinnedPoolStats stats_;
};

const char* LockModeName(PinnedPool::LockMode mode);

}  // namespace strata
