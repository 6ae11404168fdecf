// GatherPool: the device buffers stage 3 gathers parameters into (engine/zero/hooks/zero3_hooks.h),
// kept and reused across gathers instead of allocated and freed at each one.
//
// A released buffer goes back to the pool with an event recorded on the stream of its last use
// (the compute stream); the next gather of the same byte size takes it and makes its own stream
// (the gather stream) wait for that event — no host blocking, and no allocation in the hot path
// once the pool has grown. A free buffer whose last use is still running is passed over for a new
// one while the limit has room (Note [Busy buffers] in gather_pool.cc), so gathers taken ahead do
// not wait for the compute stream to catch up with the engine thread.
// The pool holds at most `limit_bytes` (the hooks' bytes held plus the free buffers kept): past
// it, free buffers of other sizes are given back to the device (waiting on the host for their
// last use) before a new one is allocated; when every byte is held a new buffer is allocated
// anyway (a module's own gathers may pass the limit by that module, as the live-parameter bound
// of the coordinator allows). limit_bytes 0: no pooling — Take allocates and Give frees in
// stream order, as before.
//
// Thread safety: one thread (the engine's, through the hooks) drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata {

struct GatherPoolStats {
  uint64_t allocations = 0;  // buffers allocated from the device
  uint64_t reuses = 0;       // gathers served by a free buffer
  uint64_t busy_passed = 0;  // new buffers taken while a free one was still in use
  uint64_t trims = 0;        // free buffers given back to the device
};

class GatherPool {
 public:
  GatherPool(Device* device, uint64_t limit_bytes) : device_(device), limit_bytes_(limit_bytes) {}
  // Frees every free buffer (after its last use). Buffers handed out must have been given back.
  ~GatherPool();
  GatherPool(const GatherPool&) = delete;
  GatherPool& operator=(const GatherPool&) = delete;

  // A buffer of exactly `bytes` for work enqueued on `stream` from now on (the stream waits for
  // the buffer's last use when it is a reused one). `held_bytes`: what the caller holds now,
  // counted against the limit. OutOfMemory from the device when even an empty pool cannot make
  // room.
  Result<void*> Take(size_t bytes, const Stream& stream, uint64_t held_bytes);
  // Takes back a buffer from Take: its last use is what `last_use` has enqueued so far.
  Status Give(void* ptr, size_t bytes, const Stream& last_use);
  // Gives every free buffer back to the device, waiting for each one's last use.
  Status Trim();

  bool pooling() const { return limit_bytes_ > 0; }
  uint64_t free_bytes() const { return free_bytes_; }
  const GatherPoolStats& stats() const { return stats_; }

 private:
  struct FreeBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    Event last_use;
    Stream last_stream;  // where last_use was recorded
  };
  // Frees the oldest free buffer not of size `keep_bytes`; false if there is none.
  Result<bool> TrimOne(size_t keep_bytes);
  Result<Event> NewEvent();

  Device* device_;
  uint64_t limit_bytes_;
  std::vector<FreeBuffer> free_;  // oldest first
  std::vector<Event> spare_events_;
  uint64_t free_bytes_ = 0;
  GatherPoolStats stats_;
};

}  // namespace strata
