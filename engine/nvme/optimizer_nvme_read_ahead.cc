// NvmeOptimizerState's read-ahead (engine/nvme/optimizer_nvme.h): which states the buffers keep
// for the order the step wants them (Window), which copies give up their room for a state that
// needs one (MakeRoom), and the reads and evictions put in flight ahead of the updates
// (ReadAhead). The slots, their I/O and AcquireState are in optimizer_nvme_async.cc.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/nvme/optimizer_nvme.h"

namespace strata {

// Note [Resident states stay]
// The read-ahead keeps the states it wants in the buffers: those already there (read this step,
// or left by the last one: write-back keeps every updated state until its room is needed), and
// the next ones it wants, in order, as far as the room the others leave holds them. Only copies
// outside that set (the sub-groups updated this step, which the next step wants last... or not
// at all) are written out and dropped to make room. Before, the set was the first of `wanted` that
// fit, whether resident or not: with the states of a step not all fitting, the ones the last step
// left (the backward's last, its first to update) were outside it, so the next step's first
// read-ahead wrote them all out and read them back at the end of its backward - every state read
// and written every step (bench/overlap's compute size: 355 of 404 MB a step with 268 MB of
// buffers). Kept, a step reads what the buffers cannot hold: once the buffers are full of states
// it wants, the first state it needs takes the room of the one it wants last (AcquireState gives
// up the kept copies needed last first), and each later one the room of a state this step has
// updated. Which room goes: Note [Room for a state].
// Note [Room to read ahead]
// Kept without a limit, the resident states a step wants later filled the buffers: at
// bench/scale's 22 layers (state 13.4 GB, 1.2 GB of buffers) each deferred update of the forward
// found no room but the one it freed itself, so it wrote the state updated before it, then read
// its own (24 + 14 ms), then its gradients, then ran Adam, with nothing read ahead (three states
// were in flight before [Resident states stay]). So where the buffers hold a quarter of the
// state or less, the window is first the prefix of `wanted` up to two of the largest states to
// read (at most half the buffers), with the resident states that come before them, and only then
// the resident states wanted later, in what room is left: those wanted last go first, as
// AcquireState would let them go once the room is needed. Where the buffers hold more, keeping
// saves more than the reserve would cost, and every resident state is kept first. The read-ahead
// makes that room as I/O completes, every state's at once (Note [Rooms together], Note [Reads
// while waiting] in step_overlap_worker.cc).
// Note [The forward's states stay]
// With deferred updates (engine/overlap/step_overlap_defer.cc) the next forward gathers its first
// sub-groups as soon as the step returns, each after its update: a deferred update whose state is
// not in the buffers is an eviction, a read and Adam on the forward's path, one after the other.
// At bench/overlap's io size the forward (~40 ms of link alone) took 120-150 ms, waiting for two
// such misses a step, while the disk sat idle through most of the backward. So where the buffers
// hold more than a quarter of the state but not all of it, and the forward waits for deferred
// updates (keep_first), the window always keeps the states of the first sub-groups in flat order
// (the forward's first), as many as leave room for two of the largest states, and the other
// states stream through that room in the order wanted (the backward's, last first), as far as it
// holds them: a state read during the forward or the backward, updated, written and its room
// read into again. More bytes move (the streamed states every step), but in the backward's idle
// disk time rather than on the forward's path. bench/overlap with 32 MiB chunks x 8 buffers,
// without (two runs, `--rounds 2`) / with it (the median of three, `--rounds 3`): io 0.236-0.254 /
// 0.214 s, balanced 0.266-0.280 / 0.229 s, nvme 0.226-0.241 / 0.224 s; with the default 64 MiB x 4
// the two rooms hold two states and the gain is small (docs/infinity.md, 2026-12-01, tenth
// session).
std::vector<int> NvmeOptimizerState::FirstStatesWindow(std::span<const int> wanted) const {
  if (!keep_first_ || first_kept_ == 0) return {};
  const auto first = [&](int w) { return static_cast<size_t>(w) < first_kept_; };
  std::vector<int> out;
  out.reserve(wanted.size());
  for (const int w : wanted) {
    if (first(w)) out.push_back(w);
  }
  uint64_t used = first_kept_bytes_;
  for (const int w : wanted) {  // the others in the order wanted, none past one that does not fit
    if (first(w)) continue;
    const int idx = swap_index_[static_cast<size_t>(w)];
    const uint64_t b = idx < 0 ? 0 : swapper_->state_bytes(idx);
    if (used + b > region_bytes_) break;
    used += b;
    out.push_back(w);
  }
  return out;
}

std::vector<int> NvmeOptimizerState::Window(std::span<const int> wanted) const {
  if (slot_of_.empty()) return {};
  if (std::vector<int> w = FirstStatesWindow(wanted); !w.empty()) return w;
  auto bytes_of = [&](int w) -> uint64_t {
    const int idx = swap_index_[static_cast<size_t>(w)];
    return idx < 0 ? 0 : swapper_->state_bytes(idx);
  };
  auto resident = [&](int w) {
    return swap_index_[static_cast<size_t>(w)] >= 0 && slot_of_[static_cast<size_t>(w)] >= 0;
  };
  uint64_t largest = 0;
  for (const int w : wanted) largest = std::max(largest, bytes_of(w));
  // Only where the buffers hold a quarter of the state or less: keeping saves at most that share
  // of a step's bytes, and the reserve costs a few states of it.
  const uint64_t reserve = all_state_bytes_ >= 4 * region_bytes_
                               ? std::min<uint64_t>(region_bytes_ / 2, 2 * largest)
                               : 0;
  // The prefix of `wanted` whose states are kept or read first: resident ones as they come, and
  // states to read up to the reserve (the first is kept whatever the room: it may be the state
  // being updated, Note [Reads while waiting]).
  std::vector<char> in(wanted.size(), 0);
  uint64_t used = 0, ahead = 0;
  size_t n = 0;
  for (; n < wanted.size(); ++n) {
    const uint64_t b = bytes_of(wanted[n]);
    if (swap_index_[static_cast<size_t>(wanted[n])] < 0) {
      in[n] = 1;
    } else if (resident(wanted[n])) {
      if (n > 0 && used + b > region_bytes_) break;
      used += b;
      in[n] = 1;
    } else {
      if (ahead + b > reserve || used + b > region_bytes_) break;
      ahead += b;
      used += b;
      in[n] = 1;
    }
  }
  // Then the other resident states, soonest wanted first (Note [Resident states stay]), and then
  // further reads in order, as far as the room goes.
  for (size_t m = n; m < wanted.size(); ++m) {
    if (!resident(wanted[m]) || used + bytes_of(wanted[m]) > region_bytes_) continue;
    used += bytes_of(wanted[m]);
    in[m] = 1;
  }
  for (size_t m = n; m < wanted.size(); ++m) {
    if (in[m] != 0 || resident(wanted[m])) continue;
    const uint64_t b = bytes_of(wanted[m]);
    if (used + b > region_bytes_) break;  // the reads go in the order wanted: none past it
    used += b;
    in[m] = 1;
  }
  std::vector<int> out;
  out.reserve(wanted.size());
  for (size_t n = 0; n < wanted.size(); ++n) {
    if (in[n] != 0) out.push_back(wanted[n]);
  }
  return out;
}

// Note [Room for a state]
// A state takes a contiguous range of the region (Note [Slots by size]). When no free range fits
// it, the range to clear holds no copy in `keep` and no read in flight, and of those the one whose
// oldest copy was updated last: the copies not kept are the states this step has updated, which
// the next step wants again in the same order, so the one updated last is wanted last (Belady's
// choice), and the states updated first stay for the next step's start (a simulation of the
// compute size's order, 8 states in 277 MB: 179 MB a step, 210 MB choosing the fewest bytes).
// Ties go to the range that costs least: every copy in it is a state to read again later (its
// bytes) and a dirty one a write now (its bytes again). A range whose writes are under way already
// goes before any that needs new ones (a write started for a room not taken is a write for
// nothing). Only the dirty copies of that range are
// written (the room is free once their writes are done), not every dirty copy: a state written out
// but left in its buffer was written for nothing if it is updated again before its room is needed
// (Note [Write-back]).
bool NvmeOptimizerState::MakeRoom(size_t need_bytes, std::span<const int> keep,
                                  std::vector<std::pair<size_t, size_t>>* taken) {
  if (need_bytes > region_bytes_) return false;
  auto overlaps_taken = [&](size_t start) {
    if (taken == nullptr) return false;
    return std::any_of(taken->begin(), taken->end(), [&](const std::pair<size_t, size_t>& r) {
      return start < r.first + r.second && r.first < start + need_bytes;
    });
  };
  std::vector<size_t> used;  // records holding a range, by offset
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (slots_[k].state != Slot::State::kFree) used.push_back(k);
  }
  std::sort(used.begin(), used.end(),
            [&](size_t a, size_t b) { return slots_[a].offset < slots_[b].offset; });
  auto blocks = [&](const Slot& s) {
    return s.state == Slot::State::kReading || InSet(keep, s.sg);
  };
  uint64_t best_cost = UINT64_MAX, best_oldest = 0;
  bool best_writes = true;
  size_t best_start = 0;
  // A range that clears the least starts at the region's start or where a copy ends.
  for (size_t c = 0; c <= used.size(); ++c) {
    const size_t start = c == 0 ? 0 : slots_[used[c - 1]].offset + slots_[used[c - 1]].bytes;
    if (start + need_bytes > region_bytes_ || overlaps_taken(start)) continue;
    uint64_t cost = 0, oldest = UINT64_MAX;
    bool ok = true, writes = false;
    for (size_t u = c; u < used.size() && slots_[used[u]].offset < start + need_bytes; ++u) {
      const Slot& s = slots_[used[u]];
      if (s.offset + s.bytes <= start) continue;
      if (blocks(s)) {
        ok = false;
        break;
      }
      cost += s.bytes + (s.state == Slot::State::kValid && s.dirty ? s.bytes : 0);
      oldest = std::min(oldest, s.updated);
      writes |= s.state == Slot::State::kValid && s.dirty;
    }
    // A range whose writes are under way already (no new write) first, else the choice above.
    const bool better = best_cost == UINT64_MAX || (best_writes && !writes) ||
                        (best_writes == writes &&
                         (oldest > best_oldest || (oldest == best_oldest && cost < best_cost)));
    if (ok && better) {
      best_cost = cost;
      best_oldest = oldest;
      best_writes = writes;
      best_start = start;
    }
  }
  if (best_cost == UINT64_MAX) return false;
  if (taken != nullptr) taken->emplace_back(best_start, need_bytes);
  bool waits = false;
  for (const size_t k : used) {
    Slot& s = slots_[k];
    if (s.offset >= best_start + need_bytes || s.offset + s.bytes <= best_start) continue;
    if (s.state == Slot::State::kValid && s.dirty) StartWrite(k);
    waits |= s.state == Slot::State::kWriting;
  }
  return waits;
}

Status NvmeOptimizerState::ReadAhead(std::span<const int> wanted, bool* waiting_helps) {
  *waiting_helps = false;
  STRATA_RETURN_IF_ERROR(EnsureSlots());
  Status first;
  for (size_t k = 0; k < slots_.size(); ++k) {
    Status s = Settle(k, false);
    if (!s.ok() && first.ok()) first = s;
  }
  STRATA_RETURN_IF_ERROR(first);
  const std::vector<int> window = Window(wanted);
  bool in_flight = false;
  for (const Slot& s : slots_) {
    in_flight |= s.state == Slot::State::kReading || s.state == Slot::State::kWriting;
  }
  // Note [The next state's room]
  // The state needed next, when it is not in the buffers and the room it needs holds only states
  // the read-ahead keeps (a step's start: the buffers full of states the last step left), takes
  // the room of those needed last now, as its AcquireState would once its gradients are there:
  // the same bytes, read while the forward (or the backward before its first update) runs.
  // With room kept to read ahead (Note [Room to read ahead]) the state needed next is in the
  // window but may still find no range free of kept copies (they lie scattered): the same then.
  const int front = !wanted.empty() && swap_index_[static_cast<size_t>(wanted.front())] >= 0 &&
                            slot_of_[static_cast<size_t>(wanted.front())] < 0
                        ? wanted.front()
                        : -1;
  auto give_up_kept = [&]() {
    const size_t need = swapper_->state_bytes(swap_index_[static_cast<size_t>(front)]);
    for (size_t n = window.size() + 1; n-- > 0;) {
      const std::span<const int> keep = std::span<const int>(window).first(n);
      const int k = Place(front, keep);
      if (k >= 0) {
        StartRead(front, static_cast<size_t>(k));
        *waiting_helps = true;
        return;
      }
      if (MakeRoom(need, keep)) {
        *waiting_helps = true;
        return;
      }
    }
    *waiting_helps = in_flight;
  };
  if (front >= 0 && !InSet(window, front)) {
    give_up_kept();
    return Status::Ok();
  }
  // Note [Rooms together]
  // Once a state of the window finds no room, the copies not in the window make it (Note [Room
  // for a state]), and make it for every later state of the window too, each in a range of its
  // own: their writes go out together, and their reads follow as the rooms come free. Making one
  // room per call (and, with the range whose writes are under way preferred, the same room on the
  // next call) left one eviction in flight: at bench/scale's 22 layers each state's read went out
  // only during the update before its own, a write's time after that update's room was asked
  // for. The reads still go out in the window's order: none is placed after a state that waits.
  std::vector<std::pair<size_t, size_t>> taken;  // the rooms being made by this call
  bool waits = false;
  for (const int w : window) {
    if (swap_index_[static_cast<size_t>(w)] < 0) continue;  // empty
    const int at = slot_of_[static_cast<size_t>(w)];
    if (at >= 0) {
      if (slots_[static_cast<size_t>(at)].state != Slot::State::kValid) *waiting_helps = true;
      continue;
    }
    if (!waits) {
      const int k = Place(w, window);
      if (k >= 0) {
        StartRead(w, static_cast<size_t>(k));
        in_flight = true;
        continue;
      }
      waits = true;
    }
    const size_t need = swapper_->state_bytes(swap_index_[static_cast<size_t>(w)]);
    const bool made = MakeRoom(need, window, &taken);
    if (!made && w == front) {  // no range free of kept copies (Note [The next state's room])
      give_up_kept();
      return Status::Ok();
    }
    in_flight |= made;
    *waiting_helps |= in_flight;
  }
  return Status::Ok();
}

}  // namespace strata
