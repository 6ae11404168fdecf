// StepOverlap's worker thread: which states it wants next (WantedLocked), its loop (WorkerLoop) and
// one sub-group's update (UpdateOne), with the swap buffers' reads ahead
// (engine/overlap/step_overlap.h).
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "engine/base/trace.h"
#include "engine/overlap/step_overlap.h"

namespace strata {

// Note [Ready and resident first]
// The worker never sits on I/O while it has work. Waiting for the oldest I/O with nothing ready
// (so that the next ReadAhead finds the room or the read it wants) stops as soon as a sub-group's
// gradients arrive: in bench/overlap's balanced step the worker blocked on a 50 MB read of the
// sub-group needed last (15 ms) while sub-group 3 was ready and resident, and all later updates
// slid by that much past backward's end. Of the ready sub-groups the first whose state needs no
// read goes first (the others' reads are in flight meanwhile: the queue's order is only the order
// the gradients arrived, and each update is independent of the others).
//
// Note [Reads while waiting]
// An update read ahead once and then blocked on its own state, so the room that writes in flight
// gave back while it waited, and while Adam ran, stayed unused until the next update's
// read-ahead (which makes the rooms it can: Note [Rooms together]).
// Now, until its own state is resident, the worker waits for the oldest I/O in flight and reads
// ahead again as each one completes, and once its state is there it reads ahead once more before
// Adam runs, so the next states' reads and evictions keep the queue busy while it computes
// (Note [Room to read ahead] in optimizer_nvme_read_ahead.cc). Only when I/O is issued changes; the
// updates and their order do not.
// Note [Overlapped NVMe pipeline]
// The worker alternates between two kinds of work. A ready sub-group (its gradients are on the
// host): the next reads go in flight first (ReadAhead: it, then the other ready ones, then the
// rest last first, as far as the swap buffers allow), then it waits for its own state (a read,
// or the write of its last update, whose buffer is then current), updates it in place in the
// pinned buffer and hands it back dirty (write-back: written when its room is needed). Nothing
// ready: ReadAhead, and when the wanted reads wait for I/O in flight (a read to verify, a write
// whose buffer is needed) it blocks on the oldest one, else it sleeps until kicked (a new ready
// sub-group, Begin, StartReadAhead). So the disk always has the reads of the next sub-groups in
// flight, a sub-group's update waits only for its own read, and the writes complete in the
// background. The step (StopReadAhead / Finish) takes the state back with the worker idle.
std::vector<int> StepOverlap::WantedLocked(int first) const {
  std::vector<int> w;
  if (first >= 0) w.push_back(first);
  for (size_t g : ready_) {
    if (static_cast<int>(g) != first) w.push_back(static_cast<int>(g));
  }
  const auto rest = [&](size_t g) {
    return eligible_[g] && !done_[g] && static_cast<int>(g) != first &&
           std::find(ready_.begin(), ready_.end(), g) == ready_.end();
  };
  const auto deferred_last = [&](size_t g) {
    return g < deferred_last_.size() && deferred_last_[g] != 0;
  };
  // The sub-groups `pick` takes in the order the phases reach them: the backward's (last first),
  // then those the last Defer left, in flat order (Note [Deferred reads in order]).
  const auto in_phase_order = [&](const auto& pick) {
    for (size_t g = eligible_.size(); g-- > 0;) {
      if (pick(g) && !deferred_last(g)) w.push_back(static_cast<int>(g));
    }
    for (size_t g = 0; g < eligible_.size(); ++g) {
      if (pick(g) && deferred_last(g)) w.push_back(static_cast<int>(g));
    }
  };
  in_phase_order(rest);
  // Note [Wanted across the phases]
  // Then the sub-groups this step has updated, in the order the next phases need them again:
  // the backward's (last first), then the ones the next step will defer (flat order). Before,
  // the list held this step's sub-groups not yet updated only, so once the forward's deferred
  // updates were done nothing was wanted and the disk sat idle until the next backward began
  // (bench/overlap's io size: ~40 ms a step), and that backward's first states were read when
  // their updates asked for them; and the read-ahead's room choice saw the states wanted next
  // step as not wanted at all. With the whole order the idle worker reads the next phase's first
  // states (Window and Note [The next state's room] in optimizer_nvme_read_ahead.cc pick the room
  // as before: the copies wanted last go first). Same session, old / new engine, two runs each
  // (`overlap --json --rounds 2`): io 0.245, 0.268 / 0.216, 0.214 s a step, nvme 0.271, 0.242 /
  // 0.211, 0.201 s, balanced and compute within the spread; NVMe bytes at io 312-329 / 235 MB
  // read a step. The idle worker now also waits for read-ahead I/O at a phase's end, so the
  // engine's Finish and Settle turn the read-ahead off first and the wait stops there (else the
  // engine waited for the worker's I/O: 33 ms at the end of a forward in a trace).
  in_phase_order(
      [&](size_t g) { return eligible_[g] && done_[g] != 0 && static_cast<int>(g) != first; });
  return w;
}

void StepOverlap::WorkerLoop() {
  if (o_.tracer != nullptr) o_.tracer->NameThisThread("adam overlap");
  NvmeOptimizerState* nvme = o_.nvme_opt;
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] {
      return stop_ || (!ready_.empty() && CanUpdateLocked()) ||
             (nvme != nullptr && read_ahead_on_ && kick_);
    });
    if (stop_) return;
    busy_ = true;
    if (!ready_.empty() && CanUpdateLocked()) {
      // Note [Ready and resident first]
      auto pick = ready_.begin();
      if (nvme != nullptr && !in_order_) {  // deferring: in order (Note [Deferred reads in order])
        auto there = std::find_if(ready_.begin(), ready_.end(),
                                  [&](size_t r) { return nvme->Resident(static_cast<int>(r)); });
        if (there != ready_.end()) pick = there;
      }
      const size_t g = *pick;
      ready_.erase(pick);
      const bool failed = !error_.ok();
      std::vector<int> wanted;
      if (nvme != nullptr && !failed) wanted = WantedLocked(static_cast<int>(g));
      lock.unlock();
      Status s = failed ? Status::Ok() : UpdateOne(g, wanted);
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
      ++processed_;
      kick_ = true;
    } else {
      kick_ = false;
      std::vector<int> wanted = error_.ok() ? WantedLocked(-1) : std::vector<int>();
      lock.unlock();
      bool helps = false;
      Status s = wanted.empty() ? Status::Ok() : nvme->ReadAhead(wanted, &helps);
      lock.lock();
      // Note [Ready and resident first]: the oldest I/O is waited for only until a sub-group
      // turns ready (the aio threads do not signal cv_: polled every kIoPoll).
      // Nor past the read-ahead's end (Finish, Settle): the engine waits for an idle worker then.
      while (s.ok() && helps && !stop_ && read_ahead_on_ &&
             !(!ready_.empty() && CanUpdateLocked())) {
        lock.unlock();
        Result<bool> done = nvme->WaitOldestIo(/*block=*/false);
        lock.lock();
        if (!done.ok()) s = done.status();
        if (!done.ok() || *done) break;
        cv_.wait_for(lock, kIoPoll, [&] {
          return stop_ || !read_ahead_on_ || (!ready_.empty() && CanUpdateLocked());
        });
      }
      if (!s.ok() && error_.ok()) error_ = s;
      if (s.ok() && helps) kick_ = true;  // look again once that I/O is done
    }
    busy_ = false;
    done_cv_.notify_all();
  }
}

// Runs on the worker thread, with the sub-group's gradients on the host.
Status StepOverlap::UpdateOne(size_t g, const std::vector<int>& wanted) {
  const SubGroup& sg = o_.sub_groups[g];
  const size_t n = Numel(g);
  const double trace_begin = o_.tracer != nullptr ? o_.tracer->NowUs() : 0;
  std::unique_ptr<Kept> kept;
  if (args_.speculative) kept = std::make_unique<Kept>();
  const size_t cbytes = DTypeBytes(o_.copy_dtype);
  uint8_t* copy = o_.param_copy == nullptr
                      ? nullptr
                      : static_cast<uint8_t*>(o_.param_copy) + sg.flat_begin * cbytes;
  int slot = -1;  // ring mode: the copy buffer (the worker picks g only when one is free)
  if (ring()) {
    std::lock_guard lock(mu_);
    if (ring_free_.empty()) return InternalError("overlapped step: no free copy buffer");
    slot = ring_free_.back();
    ring_free_.pop_back();
  }
  // Ring mode: the slot goes back unless the update succeeds (then WriteBackUpdated frees it).
  bool slot_taken = false;
  struct SlotGuard {
    StepOverlap* o;
    int slot;
    const bool* taken;
    ~SlotGuard() {
      if (slot < 0 || *taken) return;
      std::lock_guard lock(o->mu_);
      o->ring_free_.push_back(slot);
    }
  } guard{this, slot, &slot_taken};
  uint8_t* dst = slot >= 0 ? ring_[static_cast<size_t>(slot)].bytes() : copy;
  double t0 = SteadyNowMs();
  if (o_.cpu_opt != nullptr) {
    if (kept != nullptr && copy != nullptr) kept->copy.assign(copy, copy + n * cbytes);
    if (kept != nullptr) {
      kept->state.resize(3 * n);
      std::span<float> k(kept->state);
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kMaster, sg.flat_begin, k.subspan(0, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kExpAvg, sg.flat_begin, k.subspan(n, n)));
      STRATA_RETURN_IF_ERROR(
          o_.cpu_opt->Read(OptimizerState::Array::kExpAvgSq, sg.flat_begin, k.subspan(2 * n, n)));
    }
    STRATA_RETURN_IF_ERROR(
        o_.cpu_opt
            ->StepSubGroup(sg, args_.step, args_.hp, args_.grad_scale, o_.param_copy, o_.copy_dtype)
            .WithContext("overlapped step: sub-group " + std::to_string(g)));
  } else {
    NvmeOptimizerState* nvme = o_.nvme_opt;
    const int i = static_cast<int>(g);
    // The next reads go in flight first; then only this sub-group's own read is waited for.
    bool helps = false;
    STRATA_RETURN_IF_ERROR(nvme->ReadAhead(wanted, &helps));
    // The norm's and the overflow check's chunk sums of its (final) gradients, so the step does
    // not sum them after backward: fused into the update's tiles (the gradients in cache), or
    // else now, while its read may still be in flight.
    // Deferred updates come after the norm: nothing to sum for it.
    const bool fused = nvme->fuses_updates() && !args_.deferred;
    if (!fused && !args_.deferred) nvme->PrecomputeGradChecks(sg.flat_begin, sg.flat_end);
    // Note [Reads while waiting]
    while (!nvme->Resident(i)) {
      Result<bool> waited = nvme->WaitOldestIo(true);
      if (!waited.ok()) return waited.status().WithContext("overlapped step");
      if (!*waited) break;  // nothing in flight: AcquireState makes the room
      STRATA_RETURN_IF_ERROR(nvme->ReadAhead(wanted, &helps));
    }
    const std::vector<int> keep = nvme->Window(wanted);
    Result<OptimizerSwapper::StateView> v = nvme->AcquireState(i, keep, true);
    if (!v.ok()) return v.status().WithContext("overlapped step");
    // The reads the room now allows go out before Adam runs (Note [Reads while waiting]).
    STRATA_RETURN_IF_ERROR(nvme->ReadAhead(wanted, &helps));
    t0 = SteadyNowMs();  // the Adam time, without the wait for the read
    if (kept != nullptr) {
      if (copy != nullptr) kept->copy.assign(copy, copy + n * cbytes);
      kept->state.resize(3 * n);
      std::memcpy(kept->state.data(), v->params, n * sizeof(float));
      std::memcpy(kept->state.data() + n, v->exp_avg, n * sizeof(float));
      std::memcpy(kept->state.data() + 2 * n, v->exp_avg_sq, n * sizeof(float));
    }
    STRATA_RETURN_IF_ERROR(nvme->UpdateSubGroupInto(i, args_.step, args_.hp, args_.grad_scale,
                                                    v->params, v->exp_avg, v->exp_avg_sq, dst,
                                                    o_.copy_dtype, /*grad_checks=*/fused));
    STRATA_RETURN_IF_ERROR(nvme->WriteBack(i).WithContext("overlapped step"));  // left in flight
    // A final update is the last reader of its gradients: their chunks may leave the region's
    // buffers unwritten (Note [Gradients of resident states] in grad_region.cc).
    if (!args_.speculative)
      STRATA_RETURN_IF_ERROR(nvme->ConsumeGrads(i).WithContext("overlapped step"));
  }
  const double ms = SteadyNowMs() - t0;
  if (o_.tracer != nullptr && o_.tracer->enabled()) {
    const TraceArg args[] = {{"sub_group", static_cast<double>(g)}};
    o_.tracer->Complete("overlapped sub-group", "optimizer", trace_begin, o_.tracer->NowUs(), args);
  }
  {
    std::lock_guard lock(mu_);
    kept_[g] = std::move(kept);
    done_[g] = 1;
    adam_ms_ += ms;
    if (slot >= 0) {
      ring_of_[g] = slot;
      ++ring_pending_;
      slot_taken = true;
    }
  }
  overlapped_.fetch_add(1);
  if (!backward_ended_.load()) early_.fetch_add(1);
  return Status::Ok();
}

}  // namespace strata
