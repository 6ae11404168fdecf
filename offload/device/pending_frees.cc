#include "offload/device/pending_frees.h"

#include <utility>

namespace strata {

// Note [Waiting for the oldest frees]
// Stage 3's hooks bound the device bytes of gathered parameters and gradient slots: held plus
// freed-but-not-returned may not pass the memory plan's limit. Until 2026-11-30 a hook that would
// pass it synchronised the compute and the comm stream and counted every free as returned. In
// the backward that drained the device's whole queue at each wait: the engine thread blocked
// until the last queued gradient D2H ended, so the compute stream ran dry meanwhile and the
// backward's compute and its D2H took turns instead of overlapping (bench/overlap's io size: the
// engine blocked 7-18 ms at four slots a step, ~50 ms of a ~75 ms backward). The bound needs only
// enough bytes back: the oldest free is the first its stream reaches, so waiting for the oldest
// ones until the rest fit keeps the same bound and leaves the later work queued. Frees on two
// streams are counted in one order; one found done out of order is dropped without a wait.
// With the finer wait more frees are still queued when the next buffer is taken, so the bytes
// may fit while no single free block does (bench/overlap's nvme size: a 16 MiB gradient slot
// refused with 63 MiB free, the largest block 15 MiB). Allocate then waits as the hooks did
// before - every pending free, and the streams' other frees - and tries once more.
Status PendingFrees::Add(const Stream& stream, uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  Event e;
  if (!spare_.empty()) {
    e = std::move(spare_.back());
    spare_.pop_back();
  } else {
    STRATA_ASSIGN_OR_RETURN(e, device_->CreateEvent({.timing = false}));
  }
  STRATA_RETURN_IF_ERROR(e.Record(stream));
  entries_.push_back({std::move(e), bytes});
  bytes_ += bytes;
  return Status::Ok();
}

Status PendingFrees::WaitUntilAtMost(uint64_t max_bytes) {
  Status first_error;
  auto drop = [&](std::deque<Entry>::iterator it) {
    bytes_ -= it->bytes;
    spare_.push_back(std::move(it->done));
    return entries_.erase(it);
  };
  for (auto it = entries_.begin(); it != entries_.end() && bytes_ > max_bytes;) {
    Result<bool> done = it->done.Query();
    if (!done.ok() || *done) {
      if (!done.ok() && first_error.ok()) first_error = done.status();
      it = drop(it);
    } else {
      ++it;
    }
  }
  while (bytes_ > max_bytes && !entries_.empty()) {
    ++waits_;
    Status s = entries_.front().done.Synchronize();
    if (!s.ok() && first_error.ok()) first_error = s;
    drop(entries_.begin());
  }
  return first_error;
}

Result<void*> PendingFrees::Allocate(size_t bytes, std::span<const Stream> streams) {
  Result<void*> p = device_->Allocate(bytes);
  if (p.ok() || p.status().code() != StatusCode::kOutOfMemory) return p;
  STRATA_RETURN_IF_ERROR(WaitUntilAtMost(0));
  for (const Stream& s : streams) {
    if (s.valid()) STRATA_RETURN_IF_ERROR(s.Synchronize());
  }
  return device_->Allocate(bytes);
}

}  // namespace strata
