// PendingFrees: the device bytes stage 3's hooks have freed in stream order (gathered parameters,
// gradient slots) and that may not be back yet, so that the hooks stay within their memory
// limits while the host enqueues ahead of the device. Each stream a free is counted on records
// an event after it; a throttle that would pass the limit waits for those events (every counted
// free done) and not for the streams' later work (Note [Frees done already] in pending_frees.cc).
// AllocateAfterFrees: the allocation that, short of a block, waits for the frees still in flight.
//
// Thread safety: one thread (the engine's) calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata {

class PendingFrees {
 public:
  explicit PendingFrees(Device* device) : device_(device) {}

  // `bytes` were freed on `stream` just now (the free is enqueued there already).
  Status Note(const Stream& stream, uint64_t bytes);
  // When `held + pending + bytes` would pass `limit` (0: no limit), waits until every counted
  // free is done (at once if they are) and counts none pending after that.
  Status Throttle(uint64_t held, uint64_t bytes, uint64_t limit);
  uint64_t bytes() const { return bytes_; }

 private:
  Device* device_;
  uint64_t bytes_ = 0;  // freed since the last throttle that waited
  // Per stream (by id) frees were counted on: an event recorded after its last counted free.
  std::vector<std::pair<uint64_t, Event>> events_;
};

// A device allocation of `bytes` that, when the device is out of memory, waits for `streams`
// (every free enqueued on them returns to the device, and coalesces) and tries once more (Note
// [Room behind the frees in flight] in pending_frees.cc). Invalid streams are skipped.
Result<void*> AllocateAfterFrees(Device* device, size_t bytes,
                                 std::initializer_list<const Stream*> streams);

}  // namespace strata
