#include "engine/zero/hooks/gather_pool.h"

#include <iterator>
#include <utility>

namespace strata {

GatherPool::~GatherPool() { Trim().IgnoreError(); }

Result<Event> GatherPool::NewEvent() {
  if (!spare_events_.empty()) {
    Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  }
  return device_->CreateEvent({.timing = false});
}

Result<void*> GatherPool::Take(size_t bytes, const Stream& stream, uint64_t held_bytes) {
  if (!pooling()) {
    Result<void*> p = device_->Allocate(bytes);
    if (p.ok()) ++stats_.allocations;
    return p;
  }
  // Note [Busy buffers]: the oldest free buffer of this size whose last use is over (or was on
  // `stream` itself, e.g. the step's regather of persistent parameters); if every one is still
  // in use (the engine runs ahead of the compute stream, so a buffer released a
  // module ago usually is) and the limit has room, a new buffer, so the gather need not wait for
  // the compute stream; else the oldest, which the taking stream waits for.
  auto pick = free_.end();
  bool idle = false;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->bytes != bytes) continue;
    if (pick == free_.end()) pick = it;
    // On the stream of its last use, stream order alone makes the buffer free to write.
    if (it->last_stream == stream) {
      pick = it;
      idle = true;
      break;
    }
    Result<bool> done = it->last_use.Query();
    if (done.ok() && *done) {
      pick = it;
      idle = true;
      break;
    }
  }
  if (pick != free_.end() && !idle && held_bytes + free_bytes_ + bytes <= limit_bytes_) {
    Result<void*> p = device_->Allocate(bytes);
    if (p.ok()) {
      ++stats_.allocations;
      ++stats_.busy_passed;
      return p;
    }
    if (p.status().code() != StatusCode::kOutOfMemory) return p.status();
  }
  if (pick != free_.end()) {
    // The new contents are written on `stream`, after the buffer's last reader is done.
    STRATA_RETURN_IF_ERROR(stream.Wait(pick->last_use));
    void* p = pick->ptr;
    spare_events_.push_back(std::move(pick->last_use));
    free_bytes_ -= bytes;
    free_.erase(pick);
    ++stats_.reuses;
    return p;
  }
  while (held_bytes + free_bytes_ + bytes > limit_bytes_) {
    STRATA_ASSIGN_OR_RETURN(bool trimmed, TrimOne(bytes));
    if (!trimmed) break;  // every byte is held: pass the limit by this buffer
  }
  for (;;) {
    Result<void*> p = device_->Allocate(bytes);
    if (p.ok()) {
      ++stats_.allocations;
      return p;
    }
    if (p.status().code() != StatusCode::kOutOfMemory) return p.status();
    // Other device memory (activations, gradient slots) needs the room the free buffers hold.
    STRATA_ASSIGN_OR_RETURN(bool trimmed, TrimOne(0));
    if (!trimmed) return p.status();
  }
}

Status GatherPool::Give(void* ptr, size_t bytes, const Stream& last_use) {
  if (!pooling()) return device_->FreeAsync(last_use, ptr);
  STRATA_ASSIGN_OR_RETURN(Event e, NewEvent());
  STRATA_RETURN_IF_ERROR(e.Record(last_use));
  free_.push_back({ptr, bytes, std::move(e), last_use});
  free_bytes_ += bytes;
  return Status::Ok();
}

Result<bool> GatherPool::TrimOne(size_t keep_bytes) {
  // The oldest buffer whose last use is over; else the oldest, waited for.
  auto pick = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->bytes == keep_bytes) continue;
    if (pick == free_.end()) pick = it;
    Result<bool> done = it->last_use.Query();
    if (!done.ok() || *done) {
      pick = it;
      break;
    }
  }
  if (pick == free_.end()) return false;
  // A failed stream reports its error at its own synchronisation; its work no longer reads the
  // buffer either way.
  pick->last_use.Synchronize().IgnoreError();
  Status s = device_->Free(pick->ptr);
  free_bytes_ -= pick->bytes;
  spare_events_.push_back(std::move(pick->last_use));
  free_.erase(pick);
  ++stats_.trims;
  STRATA_RETURN_IF_ERROR(s.WithContext("gathered-parameter pool: freeing a buffer"));
  return true;
}

Status GatherPool::Trim() {
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(bool trimmed, TrimOne(0));
    if (!trimmed) return Status::Ok();
  }
}

}  // namespace strata
