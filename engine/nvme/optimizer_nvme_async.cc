// NvmeOptimizerState's asynchronous path (engine/nvme/optimizer_nvme.h): sub-group states read
// ahead into the swapper's pinned buffers and written back with the writes left in flight.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/clock.h"
#include "engine/base/trace.h"
#include "engine/nvme/optimizer_nvme.h"

namespace strata {
Status NvmeOptimizerState::EnsureSlots() {
  if (!slots_.empty()) return Status::Ok();
  STRATA_RETURN_IF_ERROR(swapper_->PrepareBuffers().WithContext("offload_optimizer nvme"));
  region_bytes_ = swapper_->region_bytes();
  all_state_bytes_ = 0;
  for (const int idx : swap_index_) all_state_bytes_ += idx < 0 ? 0 : swapper_->state_bytes(idx);
  // Note [The forward's states stay]: the first sub-groups whose states fit in the region less
  // two of the largest states' room, where the state is more than the region and less than four.
  uint64_t largest = 0;
  for (const int idx : swap_index_)
    largest = std::max(largest, idx < 0 ? 0 : swapper_->state_bytes(idx));
  first_kept_ = 0;
  first_kept_bytes_ = 0;
  if (all_state_bytes_ > region_bytes_ && all_state_bytes_ < 4 * region_bytes_ &&
      region_bytes_ > 2 * largest) {
    for (const int idx : swap_index_) {
      const uint64_t b = idx < 0 ? 0 : swapper_->state_bytes(idx);
      if (first_kept_bytes_ + b > region_bytes_ - 2 * largest) break;
      first_kept_bytes_ += b;
      ++first_kept_;
    }
  }
  slots_.assign(std::max<size_t>(static_cast<size_t>(swapper_->num_sub_groups()), 1), Slot{});
  slot_of_.assign(groups_.size(), -1);
  written_since_update_.assign(groups_.size(), 1);
  return Status::Ok();
}

OptimizerSwapper::StateView NvmeOptimizerState::SlotState(size_t k) const {
  const Slot& s = slots_[k];
  return swapper_->StateAt(swap_index_[static_cast<size_t>(s.sg)], s.offset);
}

bool NvmeOptimizerState::async_busy() const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [](const Slot& s) { return s.state != Slot::State::kFree; });
}

NvmeOptimizerState::AsyncStats NvmeOptimizerState::TakeAsyncStats() {
  AsyncStats s = async_stats_;
  async_stats_ = AsyncStats();
  return s;
}

void NvmeOptimizerState::FreeSlot(size_t k) {
  Slot& s = slots_[k];
  if (s.sg >= 0) {
    slot_of_[static_cast<size_t>(s.sg)] = -1;
    in_buffers_[static_cast<size_t>(s.sg)].store(0, std::memory_order_relaxed);
  }
  s = Slot{};
}

Status NvmeOptimizerState::Settle(size_t k, bool block) {
  Slot& s = slots_[k];
  if (s.state != Slot::State::kReading && s.state != Slot::State::kWriting) return Status::Ok();
  if (!block && !s.io.ready()) return Status::Ok();
  const double t = SteadyNowMs();
  Status st = s.io.Wait();  // a read's checksums are verified here
  if (block) async_stats_.wait_ms += SteadyNowMs() - t;
  const bool read = s.state == Slot::State::kReading;
  const int i = s.sg;
  if (!st.ok()) {
    FreeSlot(k);
    return read ? st.WithContext("offload_optimizer nvme: read sub-group " + std::to_string(i))
                : st.WithContext("offload_optimizer nvme: write sub-group " + std::to_string(i) +
                                 " (left in flight; its state on NVMe is torn and the updated "
                                 "copy is dropped: resume from the last checkpoint)");
  }
  // A completed write leaves the buffer equal to NVMe; a completed read is valid, its checksums
  // verified by the update (Note [Fused checksums]) when deferred.
  s.state = Slot::State::kValid;
  s.io = SwapFuture();
  if (!read) s.deferred = false;
  s.sums_ready = false;
  return Status::Ok();
}

// Note [Slots by size]
// The swapper's buffer_count buffers are one slab, each sized for the largest sub-group's state.
// Sub-groups are not all that size (DeepSpeed's grouping closes a group once it reaches
// sub_group_size, so one holding a large last parameter, lm_head, is ~1.8x the others here), and
// one state per buffer left ~35 MB of each 88 MB buffer idle in bench/overlap: the read-ahead
// stopped at 4 sub-groups while the disk had nothing to do until backward's first update. So
// the slab is one region and each state takes a range of its own size (a multiple of 4 KiB):
// first a free gap that fits, else the first run of free room and valid copies of sub-groups not
// kept that fits (those copies are dropped), else none (the caller waits for I/O). States come
// and go in about the order backward needs them, so the gaps stay few; with no I/O in flight and
// nothing kept the whole region is free, and it holds the largest state buffer_count times.
int NvmeOptimizerState::Place(int i, std::span<const int> keep) {
  const int idx = swap_index_[static_cast<size_t>(i)];
  const size_t need = swapper_->state_bytes(idx);
  int record = -1;
  std::vector<size_t> used;  // records holding a range, by offset
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k].state == Slot::State::kFree) {
      if (record < 0) record = static_cast<int>(k);
    } else {
      used.push_back(k);
    }
  }
  if (record < 0 || need > region_bytes_) return -1;
  std::sort(used.begin(), used.end(),
            [&](size_t a, size_t b) { return slots_[a].offset < slots_[b].offset; });
  auto droppable = [&](const Slot& s) {  // a dirty copy is written first (MakeRoom)
    return s.state == Slot::State::kValid && !s.dirty && !InSet(keep, s.sg);
  };
  // Pass 0: free gaps only; pass 1: valid copies not kept count as free.
  for (int pass = 0; pass < 2; ++pass) {
    size_t start = 0;
    std::vector<size_t> drop;
    for (size_t u = 0; u <= used.size(); ++u) {
      const bool end = u == used.size();
      const Slot* s = end ? nullptr : &slots_[used[u]];
      const size_t at = end ? region_bytes_ : s->offset;
      if (at >= start && at - start >= need) {
        for (const size_t d : drop) {  // only the copies in the way
          if (slots_[d].offset < start + need) FreeSlot(d);
        }
        Claim(static_cast<size_t>(record), i, start);
        return record;
      }
      if (end) break;
      if (pass == 1 && droppable(*s)) {
        drop.push_back(used[u]);
        continue;
      }
      start = s->offset + s->bytes;
      drop.clear();
    }
  }
  return -1;
}

void NvmeOptimizerState::Claim(size_t k, int i, size_t offset) {
  FreeSlot(k);
  Slot& s = slots_[k];
  s.sg = i;
  s.offset = offset;
  s.bytes = swapper_->state_bytes(swap_index_[static_cast<size_t>(i)]);
  slot_of_[static_cast<size_t>(i)] = static_cast<int>(k);
  in_buffers_[static_cast<size_t>(i)].store(1, std::memory_order_relaxed);
}

void NvmeOptimizerState::StartRead(int i, size_t k) {
  Slot& s = slots_[k];  // placed (Place)
  const int idx = swap_index_[static_cast<size_t>(i)];
  if (!written_[static_cast<size_t>(i)]) {  // never on NVMe: zeros (PrepareSubGroupSteps)
    const OptimizerSwapper::StateView v = SlotState(k);
    const size_t n = groups_[static_cast<size_t>(i)].numel() * sizeof(float);
    std::memset(v.params, 0, n);
    std::memset(v.exp_avg, 0, n);
    std::memset(v.exp_avg_sq, 0, n);
    s.state = Slot::State::kValid;
    return;
  }
  // The checksums are verified by the update, block by block, while the bytes are in cache.
  s.deferred = swapper_->checksums();
  s.io = swapper_->ReadAt(idx, s.offset, s.deferred);
  s.state = Slot::State::kReading;
  s.seq = ++io_seq_;
  async_stats_.bytes_read += swapper_->state_bytes(idx);
  if (tracer_ != nullptr && tracer_->enabled()) {  // which state, in the order the reads go out
    const double now = tracer_->NowUs();
    const TraceArg args[] = {{"sub_group", static_cast<double>(i)},
                             {"bytes", static_cast<double>(swapper_->state_bytes(idx))}};
    tracer_->Complete(tracer_->Track("optimizer state reads"), "state read", "optimizer", now, now,
                      args);
  }
}

// Note [Write-back]
// An updated state stays in its slot, dirty, instead of being written at once: it is written when
// its room is needed (ReadAhead or AcquireState finds no room for a sub-group it wants: the dirty
// copies not among those kept go to NVMe, and their room is free once written) or by a drain
// (DrainAsync: every direct call, checkpoints, the destructor). Each step updates every sub-group,
// in the same order, so the states still in the buffers when the next step wants them were
// written every step for nothing: with the buffers holding most of the state (bench/overlap:
// 353 MB of buffers for 404 MB of state) write-through wrote 404 MB a step, write-back writes
// what the step evicts, as much as it reads. Which copies go is Place's business as before: the
// read-ahead window holds the sub-groups needed first, so those needed last are written and
// dropped first. Nothing reads a dirty sub-group from NVMe: its slot is found first, and every
// path that reads NVMe directly drains first. A failed write fails the call that waits for it
// (an eviction's: the read-ahead or acquire that needed the room; else the drain), naming the
// sub-group, the file and the offset, as a deferred write's always did. Synchronize
// (SettleWrites) leaves dirty copies alone: they are not work in flight but the newest state, in
// the buffers the next step reads.
void NvmeOptimizerState::StartWrite(size_t k) {
  Slot& s = slots_[k];
  const int idx = swap_index_[static_cast<size_t>(s.sg)];
  if (s.sums_ready) {
    s.io = swapper_->WriteAt(idx, s.offset, std::move(s.write_sums));  // the update's checksums
  } else {
    s.io = swapper_->WriteAt(idx, s.offset);  // checksums taken here, on this thread
    if (swapper_->checksums()) async_stats_.bytes_hashed_at_write += swapper_->state_bytes(idx);
  }
  s.sums_ready = false;
  s.write_sums.clear();
  s.dirty = false;
  s.state = Slot::State::kWriting;
  s.seq = ++io_seq_;
  written_[static_cast<size_t>(s.sg)] = true;
  written_since_update_[static_cast<size_t>(s.sg)] = 1;
  async_stats_.bytes_written += swapper_->state_bytes(idx);
}

void NvmeOptimizerState::WriteOutAllDirty() {
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k].state == Slot::State::kValid && slots_[k].dirty) StartWrite(k);
  }
}

Status NvmeOptimizerState::WaitAllIo() {
  Status first;
  for (size_t k = 0; k < slots_.size(); ++k) {
    Status s = Settle(k, true);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

uint64_t NvmeOptimizerState::dirty_bytes() const {
  uint64_t n = 0;
  for (const Slot& s : slots_) {
    if (s.state == Slot::State::kValid && s.dirty) {
      n += swapper_->state_bytes(swap_index_[static_cast<size_t>(s.sg)]);
    }
  }
  return n;
}

Result<bool> NvmeOptimizerState::WaitOldestIo(bool block) {
  int oldest = -1;
  for (size_t k = 0; k < slots_.size(); ++k) {
    const Slot& s = slots_[k];
    if (s.state != Slot::State::kReading && s.state != Slot::State::kWriting) continue;
    if (oldest < 0 || s.seq < slots_[static_cast<size_t>(oldest)].seq) oldest = static_cast<int>(k);
  }
  if (oldest < 0) return !block;
  Slot& s = slots_[static_cast<size_t>(oldest)];
  if (!block && !s.io.ready()) return false;
  STRATA_RETURN_IF_ERROR(Settle(static_cast<size_t>(oldest), true));
  return true;
}

bool NvmeOptimizerState::Resident(int i) const {
  if (i < 0 || static_cast<size_t>(i) >= slot_of_.size()) return false;
  const int at = slot_of_[static_cast<size_t>(i)];
  if (at < 0) return false;
  const Slot& s = slots_[static_cast<size_t>(at)];
  return s.state != Slot::State::kReading || s.io.ready();
}

Result<OptimizerSwapper::StateView> NvmeOptimizerState::AcquireState(int i,
                                                                     std::span<const int> keep,
                                                                     bool need_contents) {
  if (i < 0 || i >= num_sub_groups() || swap_index_[static_cast<size_t>(i)] < 0) {
    return InvalidArgumentError("nvme optimizer state: no non-empty sub-group " +
                                std::to_string(i) + " (there are " +
                                std::to_string(num_sub_groups()) + ")");
  }
  STRATA_RETURN_IF_ERROR(EnsureSlots());
  while (true) {
    const int at = slot_of_[static_cast<size_t>(i)];
    if (at >= 0) {
      // A read in flight, or the write of the last update: wait; the buffer is then current.
      STRATA_RETURN_IF_ERROR(Settle(static_cast<size_t>(at), true));
      Slot& s = slots_[static_cast<size_t>(at)];
      s.sums_ready = false;                    // the caller changes the buffer next
      if (!need_contents) s.deferred = false;  // it overwrites all of it: nothing to verify
      return SlotState(static_cast<size_t>(at));
    }
    int k = Place(i, keep);
    if (k < 0) {  // the region is busy with I/O or holds kept or dirty sub-groups
      // The copies not kept make the room (Note [Room for a state]): wait for their writes.
      const size_t need = swapper_->state_bytes(swap_index_[static_cast<size_t>(i)]);
      const bool writes = MakeRoom(need, keep);
      STRATA_ASSIGN_OR_RETURN(bool waited, WaitOldestIo());
      if (waited || writes) continue;
      // Nothing in flight and no room without the kept copies (keep larger than the region, or
      // the kept copies scattered so no gap fits): give up the kept copies needed last first
      // (Note [Resident states stay]).
      for (size_t n = keep.size(); k < 0 && n-- > 0;) {
        k = Place(i, keep.first(n));
        if (k < 0 && MakeRoom(need, keep.first(n))) {
          STRATA_RETURN_IF_ERROR(WaitAllIo());
          k = Place(i, keep.first(n));
        }
      }
      if (k < 0) {
        return InternalError("nvme optimizer state: no room for sub-group " + std::to_string(i) +
                             " (" + std::to_string(need) + " bytes) in " +
                             std::to_string(region_bytes_) +
                             " bytes of buffers with no I/O in flight");
      }
    }
    if (need_contents) {
      StartRead(i, static_cast<size_t>(k));
      continue;  // waits for it above
    }
    slots_[static_cast<size_t>(k)].state = Slot::State::kValid;
    return SlotState(static_cast<size_t>(k));
  }
}

Status NvmeOptimizerState::WriteBack(int i) {
  const int at =
      i >= 0 && i < num_sub_groups() && !slot_of_.empty() ? slot_of_[static_cast<size_t>(i)] : -1;
  if (at < 0 || slots_[static_cast<size_t>(at)].state != Slot::State::kValid) {
    return FailedPreconditionError("nvme optimizer state: WriteBack of sub-group " +
                                   std::to_string(i) + " without its state acquired");
  }
  Slot& s = slots_[static_cast<size_t>(at)];
  if (s.deferred) {
    // Read, but not through the fused update: its blocks are verified before they are written
    // back under new checksums (a mismatch drops the slot).
    Status v = VerifyRest(static_cast<size_t>(at));
    if (!v.ok()) {
      FreeSlot(static_cast<size_t>(at));
      return v.WithContext("offload_optimizer nvme: read sub-group " + std::to_string(i));
    }
  }
  s.updated = ++update_seq_;
  if (options_.write_back) {
    // On NVMe before anything can read it there (Note [Write-back]), so it counts as written.
    s.dirty = true;
    written_[static_cast<size_t>(i)] = true;
    return Status::Ok();
  }
  StartWrite(static_cast<size_t>(at));
  return Status::Ok();
}

Status NvmeOptimizerState::DrainAsync() {
  if (drain_hook_) drain_hook_();
  WriteOutAllDirty();
  Status first;
  for (size_t k = 0; k < slots_.size(); ++k) {
    Slot& s = slots_[k];
    if (s.state == Slot::State::kReading) {
      s.io.Wait().IgnoreError();  // dropped: its error does not matter
    } else if (s.state == Slot::State::kWriting) {
      Status w = Settle(k, true);
      if (!w.ok() && first.ok()) first = w;
    }
    FreeSlot(k);
  }
  return first;
}

Status NvmeOptimizerState::SettleWrites() {
  if (drain_hook_) drain_hook_();
  Status first;
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k].state != Slot::State::kWriting) continue;
    Status w = Settle(k, true);
    if (!w.ok() && first.ok()) first = w;
  }
  return first;
}

Status NvmeOptimizerState::StepAsync(int64_t step, const Hyperparams& hp, float grad_scale,
                                     ParamCopyTarget* copy, const std::vector<char>& skip) {
  TraceSpan span(tracer_, "optimizer step (nvme)", "optimizer");  // as Step's
  swapper_stepped_ = false;
  sg_bytes_read_ = sg_bytes_written_ = 0;
  sg_wait_ms_ = sg_update_ms_ = 0;
  STRATA_RETURN_IF_ERROR(PrepareSubGroupSteps());
  STRATA_RETURN_IF_ERROR(EnsureSlots());
  TakeAsyncStats();  // not this step's (the overlapped step took its worker's)
  // The states already in a slot first (read ahead, or the write of an early update), then the
  // rest in order.
  std::vector<int> todo;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (skip[i] == 0 && swap_index_[i] >= 0 && slot_of_[i] >= 0)
      todo.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (skip[i] == 0 && swap_index_[i] >= 0 && slot_of_[i] < 0) todo.push_back(static_cast<int>(i));
  }
  Status s;
  for (size_t k = 0; k < todo.size() && s.ok(); ++k) {
    const int i = todo[k];
    const std::span<const int> rest(todo.data() + k, todo.size() - k);
    const std::vector<int> window = Window(rest);
    bool helps = false;
    s = ReadAhead(window, &helps);  // the next reads in flight during this update
    if (!s.ok()) break;
    Result<OptimizerSwapper::StateView> v = AcquireState(i, window, true);
    if (!v.ok()) {
      s = v.status();
      break;
    }
    const double t = SteadyNowMs();
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    uint8_t* dst = nullptr;
    if (copy != nullptr) {
      Result<uint8_t*> d = copy->Begin(g);
      if (!d.ok()) {
        s = d.status();
        break;
      }
      dst = *d;
    }
    s = UpdateSubGroupInto(i, step, hp, grad_scale, v->params, v->exp_avg, v->exp_avg_sq, dst,
                           copy != nullptr ? copy->dtype() : DType::kBFloat16);
    if (s.ok()) s = WriteBack(i);
    sg_update_ms_ += SteadyNowMs() - t;
    if (s.ok() && copy != nullptr) s = copy->Commit(g);
  }
  const AsyncStats st = TakeAsyncStats();
  sg_bytes_read_ = st.bytes_read;
  sg_bytes_written_ = st.bytes_written;
  sg_wait_ms_ = st.wait_ms;
  span.AddArg("async", 1);
  span.AddArg("wait_ms", sg_wait_ms_);
  span.AddArg("update_ms", sg_update_ms_);
  if (!s.ok()) return s.WithContext("offload_optimizer nvme step " + std::to_string(step));
  return Status::Ok();
}

}  // namespace strata
