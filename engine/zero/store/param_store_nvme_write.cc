// ParamStore on NVMe, its write path: Write copies the new values into swap buffers and starts
// the writes (Note [Asynchronous write-back]), a write that covers part of a shard fills its
// buffer first (Note [Filling a shard]), and the writes in flight are finished when something
// needs them (FlushOne, Drain). The reads and the lazy release: param_store_nvme.cc.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/zero/store/param_store_nvme_impl.h"

namespace strata::internal {

// Note [Asynchronous write-back]
// Write copies the new values into swap buffers (so the caller's source may change at once),
// starts the writes and returns. A write stays in flight, holding its buffer, until something
// needs it finished: an Acquire of that shard (it waits for the write, then reads the shard as
// usual), a later Write of it, a read or allocation that finds the buffers full (the oldest write
// is finished first), Drain (checkpoints), or the destructor. A write that failed fails the call
// that finished it, with the swap file and offset in the message; the swapper keeps that shard's
// buffer (the only copy of its values).

// Note [Filling a shard]
// The optimizer hands its updates over one swap chunk at a time (engine/optim/
// param_copy_target.h), and a chunk may hold part of a parameter's shard. A write that covers
// part of a shard therefore does not write it at once (that would write the shard once per chunk
// it spans, and read it back before each): the shard takes a buffer (kFilling), each write copies
// its range in and records it, and the shard's write starts when its ranges cover it. The old
// bytes are not read for that: when a fill must end early (an Acquire of the shard, buffers
// needed, Drain — e.g. after an overflow skipped the rest of the step), the ranges not written
// are taken from the NVMe copy then (ReadNvmeCopy), so the shard holds exactly what it held plus
// the writes. A shard whose buffer already held its current bytes (a cached one, or one never
// written: zeros) needs no such read.

Status NvmeParamStore::Write(size_t flat_begin, const void* src, size_t numel, const Stream&) {
  std::lock_guard lock(mu_);
  const size_t flat_end = flat_begin + numel;
  if (flat_end > options_.layout->partition_numel()) {
    return InvalidArgumentError("offload_param nvme: write of [" + std::to_string(flat_begin) +
                                ", " + std::to_string(flat_end) + ") past the partition's " +
                                std::to_string(options_.layout->partition_numel()) + " elements");
  }
  const uint8_t* in = static_cast<const uint8_t*>(src);
  const std::vector<ShardSlice>& slices = options_.layout->slices();
  Status first;
  for (size_t i = 0; i < slices.size() && first.ok(); ++i) {
    const ShardSlice& sl = slices[i];
    const size_t b = std::max(flat_begin, sl.flat_offset);
    const size_t e = std::min(flat_end, sl.flat_offset + sl.shard_numel);
    if (!slots_[i].registered || b >= e) continue;
    first = WriteOne(i, b - sl.flat_offset, e - b, in + (b - flat_begin) * ebytes_);
  }
  // `src` was copied into the swap buffers: the writes finish later (Note [Asynchronous
  // write-back]).
  return first;
}

Status NvmeParamStore::Drain() {
  std::lock_guard lock(mu_);
  Status first = FinishFills();
  Status w = FlushWrites();
  return first.ok() ? w : first;
}

// Copies `count` elements from `src` into shard `param` at element `offset` and starts writing
// the shard (finished by FlushOne: from Acquire, MakeRoom, Prefetch, Write or Drain).
Status NvmeParamStore::WriteOne(size_t param, size_t offset, size_t count, const uint8_t* src) {
  Slot& s = slots_[param];
  const ParamId id = static_cast<ParamId>(param);
  const bool whole = offset == 0 && count == options_.layout->slices()[param].shard_numel;
  if (s.state == State::kFilling) {  // Note [Filling a shard]
    STRATA_RETURN_IF_ERROR(WriteInto(param, offset, count, src));
    if (whole) s.filled.clear();
    return AddFilled(param, offset, count);
  }
  switch (s.state) {
    case State::kFilling:
    case State::kAcquired:
      return FailedPreconditionError(Where(param, "write") + ": the shard is acquired");
    case State::kWriting:  // written again: its previous write finishes first
      STRATA_RETURN_IF_ERROR(FlushOne(param));
      break;
    case State::kDone:
      DropDoneEntry(param, /*wait=*/true);
      s.state = State::kIdle;
      // Its buffer is still allocated and holds the current bytes: Allocate returns it.
      STRATA_RETURN_IF_ERROR(WriteInto(param, offset, count, src));
      if (whole) return StartWrite(param);
      return BeginFill(param, offset, count, /*base_valid=*/true);
    case State::kPrefetched: {
      Unprefetch(param);
      s.state = State::kIdle;
      Status st = swapper_->WaitIn({&id, 1});
      if (!st.ok()) {
        // A whole-shard write does not need the old bytes: drop them (the buffer is gone).
        if (!whole) return st.WithContext(Where(param, "read before a partial write"));
        break;
      }
      STRATA_RETURN_IF_ERROR(WriteInto(param, offset, count, src));
      if (whole) return StartWrite(param);
      return BeginFill(param, offset, count, /*base_valid=*/true);
    }
    case State::kIdle:
      break;
  }
  if (s.in_cpu) {
    STRATA_RETURN_IF_ERROR(WriteInto(param, offset, count, src));
    return Status::Ok();
  }
  // A partial write of a shard never written: the rest is zeros. Of one on NVMe: the rest is
  // taken from there only if the fill ends early (Note [Filling a shard]).
  STRATA_RETURN_IF_ERROR(WithRoom(param, [&]() -> Status {
    STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Allocate(id));
    if (!whole && !s.written) std::memset(buf.data(), 0, buf.size());
    return Status::Ok();
  }));
  STRATA_RETURN_IF_ERROR(WriteInto(param, offset, count, src));
  if (whole) return StartWrite(param);
  return BeginFill(param, offset, count, /*base_valid=*/!s.written);
}

// Shard `param` (its buffer allocated, [offset, offset + count) written) turns kFilling.
Status NvmeParamStore::BeginFill(size_t param, size_t offset, size_t count, bool base_valid) {
  Slot& s = slots_[param];
  s.state = State::kFilling;
  s.filled.clear();
  s.base_valid = base_valid;
  filling_.push_back(param);
  return AddFilled(param, offset, count);
}

// Records [offset, offset + count) as written; once the ranges cover the shard its write starts.
Status NvmeParamStore::AddFilled(size_t param, size_t offset, size_t count) {
  Slot& s = slots_[param];
  std::vector<std::pair<size_t, size_t>>& f = s.filled;
  f.emplace_back(offset, offset + count);
  std::sort(f.begin(), f.end());
  size_t out = 0;
  for (size_t k = 1; k < f.size(); ++k) {
    if (f[k].first <= f[out].second) {
      f[out].second = std::max(f[out].second, f[k].second);
    } else {
      f[++out] = f[k];
    }
  }
  f.resize(out + 1);
  const size_t numel = options_.layout->slices()[param].shard_numel;
  if (f.size() == 1 && f[0].first == 0 && f[0].second >= numel) return FinishFill(param);
  return Status::Ok();
}

// Ends shard `param`'s fill: the ranges not written are taken from its NVMe copy (unless the
// buffer held the current bytes), then its write starts (kWriting).
Status NvmeParamStore::FinishFill(size_t param) {
  Slot& s = slots_[param];
  auto it = std::find(filling_.begin(), filling_.end(), param);
  if (it != filling_.end()) filling_.erase(it);
  const size_t numel = options_.layout->slices()[param].shard_numel;
  const bool complete =
      s.filled.size() == 1 && s.filled[0].first == 0 && s.filled[0].second >= numel;
  if (!complete && !s.base_valid) {
    const ParamId id = static_cast<ParamId>(param);
    const size_t bytes = (numel * ebytes_ + kSwapAlign - 1) / kSwapAlign * kSwapAlign;
    std::unique_ptr<uint8_t, decltype(&std::free)> old(
        static_cast<uint8_t*>(std::aligned_alloc(kSwapAlign, bytes)), &std::free);
    if (old == nullptr) {
      return InternalError(Where(param, "fill") + ": no memory to merge its old bytes");
    }
    Status st = swapper_->ReadNvmeCopy(id, old.get());
    if (!st.ok()) {
      s.state = State::kIdle;  // the buffer holds a partial update: dropped, NVMe unchanged
      s.filled.clear();
      swapper_->Release({&id, 1}).IgnoreError();
      return st.WithContext(Where(param, "read before ending a partial write"));
    }
    STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Data(id));
    size_t at = 0;  // copy the gaps between the filled ranges
    for (const auto& [b, e] : s.filled) {
      if (b > at)
        std::memcpy(buf.data() + at * ebytes_, old.get() + at * ebytes_, (b - at) * ebytes_);
      at = e;
    }
    if (at < numel) {
      std::memcpy(buf.data() + at * ebytes_, old.get() + at * ebytes_, (numel - at) * ebytes_);
    }
  }
  s.filled.clear();
  s.state = State::kIdle;
  return StartWrite(param);
}

// Ends every fill (Drain); the first error.
Status NvmeParamStore::FinishFills() {
  Status first;
  while (!filling_.empty()) {
    Status st = FinishFill(filling_.front());
    if (first.ok()) first = st;
  }
  return first;
}

Status NvmeParamStore::WriteInto(size_t param, size_t offset, size_t count, const uint8_t* src) {
  STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Data(static_cast<ParamId>(param)));
  uint8_t* dst = buf.data() + offset * ebytes_;
  if (dst != src) std::memcpy(dst, src, count * ebytes_);  // Note [Shared CPU shards]
  return Status::Ok();
}

Status NvmeParamStore::StartWrite(size_t param) {
  const ParamId id = static_cast<ParamId>(param);
  Status st = swapper_->SwapOut({&id, 1});
  if (!st.ok()) {
    // The new bytes are only in the buffer; keep it (Release would drop them).
    return st.WithContext(Where(param, "write"));
  }
  slots_[param].state = State::kWriting;
  writing_.push_back(param);
  return Status::Ok();
}

// Waits for shard `param`'s write in flight and gives its buffer back (or keeps it); its error
// if it failed (the swapper then keeps that shard's buffer: it holds the only copy).
Status NvmeParamStore::FlushOne(size_t param, bool keep_buffer) {
  auto it = std::find(writing_.begin(), writing_.end(), param);
  if (it == writing_.end()) return Status::Ok();
  writing_.erase(it);
  const ParamId id = static_cast<ParamId>(param);
  // Note [Served from the write-back]: `keep_buffer` (Acquire) keeps the buffer, which holds
  // exactly the bytes written, for the gather to read. Flushing the write and reading the shard
  // back (as Acquire once did) read every updated shard of the step again, one synchronous read
  // per gather: the next forward's reads, one at a time. A failed write keeps its buffer in the
  // swapper either way (the only copy).
  Status st = keep_buffer ? swapper_->WaitOut({&id, 1}) : swapper_->Release({&id, 1});
  slots_[param].state = State::kIdle;
  slots_[param].data = nullptr;
  if (!st.ok()) return st.WithContext(Where(param, "write"));
  slots_[param].written = true;
  return Status::Ok();
}

// Finishes every write in flight; the first error is returned.
Status NvmeParamStore::FlushWrites() {
  Status first;
  while (!writing_.empty()) {
    Status st = FlushOne(writing_.front());
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace strata::internal
