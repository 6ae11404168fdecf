#include "engine/zero/hooks/pending_frees.h"

#include <algorithm>
#include <iterator>

namespace strata {

// Note [Frees done already]
// The hooks counted the bytes freed in stream order as pending until a throttle saw them done,
// and saw them done only by synchronizing the compute and comm streams, so the count only grew
// between throttles. At each backward's first gradient slot (lm_head's, 16 MiB) it still held the
// last backward's frees, long done, and the throttle drained the compute stream (the forward's
// tail, the re-gather of lm_head: 12 ms of bench/overlap's io step with every state resident)
// while the engine enqueued nothing; inside the backward likewise (every throttle traced there
// had no slot held: the count, not the slots, passed the limit). Now each stream a free is
// counted on records an event after it, and a throttle waits for those events (at once for those
// done already): every counted free is done when it returns, as after the drain, but the work
// enqueued after them is not waited for. So the memory an allocation then finds is
// what it found after the drain, every counted free returned. (Waiting for the oldest frees only,
// until the rest fit, let slots land between blocks still held and fragmented the device arena:
// docs/infinity.md.) Same session, before / after, two runs each (`overlap --json --rounds 2`):
// io with --buffer-count 6 0.135, 0.140 / 0.119, 0.125 s a step, nvme 6 buffers 0.113, 0.105 /
// 0.098, 0.100, nvme 4 buffers 0.209, 0.199 / 0.191, 0.193; the others within their spread.
Status PendingFrees::Note(const Stream& stream, uint64_t bytes) {
  bytes_ += bytes;
  auto it = std::find_if(events_.begin(), events_.end(),
                         [&](const auto& e) { return e.first == stream.id(); });
  if (it == events_.end()) {
    STRATA_ASSIGN_OR_RETURN(Event e, device_->CreateEvent({.timing = false}));
    events_.emplace_back(stream.id(), std::move(e));
    it = std::prev(events_.end());
  }
  return it->second.Record(stream);
}

Status PendingFrees::Throttle(uint64_t held, uint64_t bytes, uint64_t limit) {
  if (limit == 0 || bytes_ == 0 || held + bytes_ + bytes <= limit) return Status::Ok();
  for (const auto& [id, event] : events_) STRATA_RETURN_IF_ERROR(event.Synchronize());
  bytes_ = 0;
  return Status::Ok();
}

// Note [Room behind the frees in flight]
// The throttle no longer drains the compute stream (Note [Frees done already]), so when a
// backward's first gradient slot is asked for, the forward's tail may still run there, and the
// temporaries it frees in stream order are still allocated. Best-fit placement around them can
// leave the device with the bytes but not the block: bench/overlap's nvme size failed in 1 of 4
// runs at lm_head's 16 MiB slot with 63.4 MiB free of 115.8 MiB and the largest free block
// 14.9 MiB, after the hooks had given back the gather pool's free buffers. An allocation that
// finds no block now waits for the streams whose frees are still in flight and tries once
// more; only a second OutOfMemory is the caller's (named, as before). The wait is on that path
// only: an allocation that succeeds waits for nothing.
Result<void*> AllocateAfterFrees(Device* device, size_t bytes,
                                 std::initializer_list<const Stream*> streams) {
  Result<void*> p = device->Allocate(bytes);
  if (p.ok() || p.status().code() != StatusCode::kOutOfMemory) return p;
  for (const Stream* s : streams) {
    if (s != nullptr && s->valid()) STRATA_RETURN_IF_ERROR(s->Synchronize());
  }
  return device->Allocate(bytes);
}

}  // namespace strata
