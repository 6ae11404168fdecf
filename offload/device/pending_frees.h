// PendingFrees: device memory freed in stream order (FreeAsync) and not yet known to be back.
//
// A host that enqueues ahead of the device frees buffers on a stream long before the stream
// reaches the free. An owner that bounds its device bytes (held + freed but not yet returned)
// counts each such free here, and when the bound would pass waits for just enough of them - the
// oldest first - instead of for every stream, so the streams keep the work already queued
// (Note [Waiting for the oldest frees] in pending_frees.cc). Not thread-safe: one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/status.h"
#include "offload/device/device.h"

namespace strata {

class PendingFrees {
 public:
  explicit PendingFrees(Device* device) : device_(device) {}

  // Counts `bytes` freed on `stream` by work enqueued on it so far (an event recorded after it).
  Status Add(const Stream& stream, uint64_t bytes);
  // The bytes counted and not yet seen returned.
  uint64_t bytes() const { return bytes_; }
  // While more than `max_bytes` are pending: drops the frees already done, then waits for the
  // oldest one at a time. The first failed stream's error (its frees are dropped either way).
  Status WaitUntilAtMost(uint64_t max_bytes);
  // Allocates `bytes` on the device; when that is OutOfMemory (the bytes may fit the owner's bound
  // but no free block), waits for every pending free and synchronises `streams` (whose other
  // frees, not counted here, return too), then tries once more: that result, OutOfMemory with
  // the device's message included.
  Result<void*> Allocate(size_t bytes, std::span<const Stream> streams);
  // Frees waited for (blocking) so far.
  uint64_t waits() const { return waits_; }

 private:
  struct Entry {
    Event done;
    uint64_t bytes = 0;
  };
  Device* device_;
  std::deque<Entry> entries_;  // in the order the frees were counted
  std::vector<Event> spare_;
  uint64_t bytes_ = 0;
  uint64_t waits_ = 0;
};

}  // namespace strata
