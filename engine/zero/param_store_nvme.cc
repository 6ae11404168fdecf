// ParamStore on NVMe (offload_param.device = nvme) through swap/ParamSwapper: one swap tensor per
// parameter shard, read into the swapper's buffer_count x buffer_size pinned buffers when a
// gather needs it (or earlier, on Prefetch), released lazily once the stream that read it has
// passed (Note [Lazy release]); written back asynchronously (Note [Asynchronous write-back]).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/units.h"
#include "engine/zero/param_store.h"

namespace strata {
namespace {

constexpr uint64_t kSwapAlign = 4096;  // SwapSpace extents

// Note [Lazy release]
// Done(i, stream) does not free i's buffer range: the copy that reads it may still be queued on
// `stream`. It records an event there and keeps the range as a cache (a parameter gathered again
// soon, e.g. the last layers of forward at the start of backward, needs no read). Ranges are
// given back only when a read or allocation finds the buffers full: first those whose event has
// completed (oldest first, without blocking), then, only if none has, by waiting for the oldest
// event; as a last resort a prefetched shard nobody has acquired yet is dropped (newest first:
// the furthest from use). Prefetch never waits: it takes completed ranges only and otherwise
// stops issuing reads. So the gather path blocks only when the buffers are truly exhausted.

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

class NvmeParamStore final : public ParamStore {
 public:
  explicit NvmeParamStore(const ParamStoreOptions& o) : ParamStore(o) {}

  ~NvmeParamStore() override {
    // Fills and writes in flight first (their errors have no caller left), events (they name the
    // device), then the swapper (waits for its I/O), then the aio handle it uses.
    FinishFills().IgnoreError();
    FlushWrites().IgnoreError();
    done_.clear();
    free_events_.clear();
    swapper_.reset();
    cpu_storage_.Release();
    cpu_pool_.reset();
    own_aio_.reset();
  }

  Status Init() {
    const ParamStoreOptions& o = options_;
    ebytes_ = DTypeBytes(o.dtype);
    ParamSwapperOptions so = o.swapper;
    so.element_bytes = ebytes_;
    so.device = o.device;
    so.budget = o.budget;
    AioHandle* aio = o.aio;
    if (aio == nullptr) {
      auto h = AioHandle::Create(o.aio_options);
      if (!h.ok()) return h.status().WithContext("offload_param nvme: aio handle");
      own_aio_ = std::move(h).value();
      aio = own_aio_.get();
    }
    auto sw = ParamSwapper::Create(so, aio);
    if (!sw.ok()) return sw.status().WithContext("offload_param nvme");
    swapper_ = std::move(sw).value();
    const std::vector<ShardSlice>& slices = o.layout->slices();
    slots_.resize(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) {
      const size_t n = slices[i].shard_numel;
      if (n == 0) continue;
      Status st = swapper_->Register(static_cast<ParamId>(i), n);
      if (!st.ok()) {
        return st.WithContext("offload_param nvme: parameter shard " + std::to_string(i) + " (" +
                              FormatBytes(n * ebytes_) + ")");
      }
      Slot& s = slots_[i];
      s.registered = true;
      s.in_cpu = !swapper_->on_nvme(static_cast<ParamId>(i));
      if (s.in_cpu) {
        cpu_kept_bytes_ += n * ebytes_;
        // ParamSwapper's CPU storage starts zeroed (a vector): already "written".
        s.written = true;
      } else {
        nvme_bytes_ += (n * ebytes_ + kSwapAlign - 1) / kSwapAlign * kSwapAlign;
      }
    }
    return KeepCpuShards();
  }

  // The shards within max_in_cpu get storage of their own: one buffer of exactly their bytes
  // (at most max_in_cpu elements: a cap, charged to the budget's CPU tier), pinned per
  // offload_param.pin_memory, instead of the swapper's vectors.
  Status KeepCpuShards() {
    if (cpu_kept_bytes_ == 0) return Status::Ok();
    const ParamStoreOptions& o = options_;
    PinnedPoolOptions po;
    po.buffer_bytes = cpu_kept_bytes_;
    po.buffer_count = 1;
    po.lock = o.pin_memory;
    po.device = o.device;
    po.budget = o.budget;
    po.name = "parameter shards kept in CPU (offload_param.max_in_cpu)";
    auto pool = PinnedPool::Create(po);
    if (!pool.ok()) return pool.status().WithContext("offload_param nvme");
    cpu_pool_ = std::move(pool).value();
    cpu_storage_ = cpu_pool_->Acquire();
    auto* at = static_cast<uint8_t*>(cpu_storage_.data());
    const std::vector<ShardSlice>& slices = o.layout->slices();
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].registered || !slots_[i].in_cpu) continue;
      STRATA_RETURN_IF_ERROR(swapper_->AdoptCpuStorage(static_cast<ParamId>(i), at));
      at += slices[i].shard_numel * ebytes_;
    }
    cpu_kept_bytes_ = cpu_pool_->buffer_bytes();
    return Status::Ok();
  }

  void* flat() const override { return nullptr; }

  // Note [Shared CPU shards]: with offload_optimizer cpu the engine's updated-parameter staging
  // (param_copy) is the flat
  // partition the optimizer writes the new parameters into; the shards within max_in_cpu then
  // had a second copy here, refreshed by a memcpy of every updated element at each step (from
  // the engine thread, during backward with the overlapped step: ~16 ms a step of the balanced
  // bench/overlap, 135 MB). Moved into that flat array, a shard is the staging range itself and
  // its Write copies nothing. What makes it safe: the staging only ever holds the parameters the
  // store is about to hold (an update, a restore from a kept copy, a load), and an update runs
  // only once a shard's last use of the pass has passed (its gradient is complete).
  Status ShareCpuFlat(void* flat) override {
    std::lock_guard lock(mu_);
    const std::vector<ShardSlice>& slices = options_.layout->slices();
    auto* base = static_cast<uint8_t*>(flat);
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.registered || !s.in_cpu) continue;
      if (s.state != State::kIdle) {
        return FailedPreconditionError(Where(i, "share CPU storage") + ": the shard is in use");
      }
      STRATA_RETURN_IF_ERROR(swapper_->AdoptCpuStorage(static_cast<ParamId>(i),
                                                       base + slices[i].flat_offset * ebytes_));
    }
    cpu_storage_.Release();  // the store's own storage (KeepCpuShards) is no longer used
    cpu_pool_.reset();
    cpu_kept_bytes_ = 0;  // the flat array's owner counts them
    return Status::Ok();
  }

  Status DoPrefetch(std::span<const size_t> params) override {
    std::lock_guard lock(mu_);
    for (size_t i : params) {
      STRATA_RETURN_IF_ERROR(Check(i));
      Slot& s = slots_[i];
      if (!s.registered || s.in_cpu || s.state != State::kIdle) continue;
      if (!s.written) continue;  // nothing on NVMe yet: Acquire zero-fills
      const ParamId id = static_cast<ParamId>(i);
      Status st = swapper_->SwapIn({&id, 1});
      while (st.code() == StatusCode::kOutOfMemory) {
        if (!ReclaimCompleted()) {
          if (writing_.empty()) break;
          // The last step's write-back left writes in flight holding the buffers: finish the
          // oldest (it has had the longest; its error, if any, is the step's to report).
          STRATA_RETURN_IF_ERROR(FlushOne(writing_.front()));
        }
        st = swapper_->SwapIn({&id, 1});
      }
      // Prefetch is best effort: with the buffers full of shards still in use it stops issuing
      // reads (Acquire reads what is missing); only a real failure is an error.
      if (st.code() == StatusCode::kOutOfMemory) return Status::Ok();
      STRATA_RETURN_IF_ERROR(st.WithContext(Where(i, "prefetch")));
      s.state = State::kPrefetched;
      prefetched_.push_back(i);
    }
    return Status::Ok();
  }

  Result<ShardView> DoAcquire(size_t param) override {
    std::lock_guard lock(mu_);
    STRATA_RETURN_IF_ERROR(Check(param));
    Slot& s = slots_[param];
    if (!s.registered) return ShardView{&zero_, true};
    const ParamId id = static_cast<ParamId>(param);
    switch (s.state) {
      case State::kAcquired:
        ++s.acquired;
        return ShardView{s.data, true};
      case State::kDone:  // still in its buffer (Note [Lazy release])
        DropDoneEntry(param);
        s.state = State::kAcquired;
        s.acquired = 1;
        return ShardView{s.data, true};
      case State::kFilling:  // Note [Filling a shard]: its write starts now
        STRATA_RETURN_IF_ERROR(FinishFill(param));
        [[fallthrough]];
      case State::kWriting:  // Note [Served from the write-back]
        STRATA_RETURN_IF_ERROR(FlushOne(param, /*keep_buffer=*/true));
        break;
      case State::kPrefetched:
        Unprefetch(param);
        break;
      case State::kIdle:
        if (s.in_cpu) break;
        if (!s.written) {
          STRATA_RETURN_IF_ERROR(WithRoom(param, [&] { return AllocateZeroed(param); }));
          break;
        }
        STRATA_RETURN_IF_ERROR(WithRoom(param, [&] {
                                 return swapper_->SwapIn({&id, 1});
                               }).WithContext(Where(param, "read")));
        break;
    }
    s.state = State::kIdle;  // until the read is known to be good
    if (!s.in_cpu) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = swapper_->WaitIn({&id, 1});
      read_wait_ms_ +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      STRATA_RETURN_IF_ERROR(st.WithContext(Where(param, "read")));
    }
    STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> data, swapper_->Data(id));
    s.data = data.data();
    s.state = State::kAcquired;
    s.acquired = 1;
    return ShardView{s.data, true};
  }

  Status Done(size_t param, const Stream& stream) override {
    std::lock_guard lock(mu_);
    STRATA_RETURN_IF_ERROR(Check(param));
    Slot& s = slots_[param];
    if (!s.registered) return Status::Ok();
    if (s.state != State::kAcquired || s.acquired <= 0) {
      return FailedPreconditionError(Where(param, "done") + ": it is not acquired");
    }
    if (--s.acquired > 0) return Status::Ok();
    if (s.in_cpu) {  // CPU-kept shards never move: nothing to release
      s.state = State::kIdle;
      return Status::Ok();
    }
    Event ev;
    if (!free_events_.empty()) {
      ev = std::move(free_events_.back());
      free_events_.pop_back();
    } else {
      STRATA_ASSIGN_OR_RETURN(ev, options_.device->CreateEvent({.timing = false}));
    }
    STRATA_RETURN_IF_ERROR(ev.Record(stream).WithContext(Where(param, "done")));
    s.state = State::kDone;
    done_.push_back({param, ++s.seq, std::move(ev)});
    return Status::Ok();
  }

  Status Write(size_t flat_begin, const void* src, size_t numel, const Stream&) override {
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

  Status Drain() override {
    std::lock_guard lock(mu_);
    Status first = FinishFills();
    Status w = FlushWrites();
    return first.ok() ? w : first;
  }

  uint64_t device_bytes() const override { return 0; }
  uint64_t cpu_bytes() const override {
    return swapper_->stats().buffer_bytes_capacity + cpu_kept_bytes_;
  }
  uint64_t nvme_bytes() const override { return nvme_bytes_; }
  uint64_t nvme_read_bytes() const override { return swapper_->stats().bytes_read; }
  uint64_t nvme_write_bytes() const override { return swapper_->stats().bytes_written; }
  void AddTo(StepBreakdown* b) override {
    std::lock_guard lock(mu_);
    const ParamSwapperStats st = swapper_->stats();
    b->nvme_read_bytes += st.bytes_read - reported_read_;
    b->nvme_write_bytes += st.bytes_written - reported_written_;
    b->io_wait_ms += read_wait_ms_;
    reported_read_ = st.bytes_read;
    reported_written_ = st.bytes_written;
    read_wait_ms_ = 0;
  }

 private:
  // kIdle: on NVMe only (or CPU-kept, not acquired). kPrefetched: a read issued, not acquired.
  // kAcquired: in use by gathers. kDone: in its buffer, waiting for its event (done_).
  // kWriting: a swap-out in flight (writing_). kFilling: partly written since its buffer was
  // taken, its write not started (filling_; Note [Filling a shard]).
  enum class State { kIdle, kPrefetched, kAcquired, kDone, kWriting, kFilling };
  struct Slot {
    bool registered = false;  // shard_numel > 0
    bool in_cpu = false;      // within max_in_cpu: kept in CPU memory by the swapper
    bool written = false;     // NVMe holds its bytes (an unwritten shard reads as zeros)
    State state = State::kIdle;
    int acquired = 0;
    uint64_t seq = 0;  // bumped on every kDone entry and re-acquire: stale done_ entries
    const uint8_t* data = nullptr;
    // kFilling: the element ranges written so far (sorted, disjoint), and whether the rest of the
    // buffer already holds the shard's current bytes.
    std::vector<std::pair<size_t, size_t>> filled;
    bool base_valid = false;
  };
  struct DoneEntry {
    size_t param;
    uint64_t seq;
    Event event;
  };

  Status Check(size_t param) const {
    if (param >= slots_.size()) {
      return InvalidArgumentError("offload_param nvme: no parameter " + std::to_string(param) +
                                  " (the layout has " + std::to_string(slots_.size()) + ")");
    }
    return Status::Ok();
  }

  std::string Where(size_t param, const char* what) const {
    return "offload_param nvme: " + std::string(what) + " of parameter shard " +
           std::to_string(param);
  }

  Status AllocateZeroed(size_t param) {
    const ParamId id = static_cast<ParamId>(param);
    STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Allocate(id));
    std::memset(buf.data(), 0, buf.size());
    return Status::Ok();
  }

  void Unprefetch(size_t param) {
    auto it = std::find(prefetched_.begin(), prefetched_.end(), param);
    if (it != prefetched_.end()) prefetched_.erase(it);
  }

  // Gives the buffer range of a kDone shard back (its event must have completed).
  Status ReleaseDone(DoneEntry& d) {
    free_events_.push_back(std::move(d.event));
    Slot& s = slots_[d.param];
    s.state = State::kIdle;
    s.data = nullptr;
    const ParamId id = static_cast<ParamId>(d.param);
    return swapper_->Release({&id, 1}).WithContext(Where(d.param, "release"));
  }

  // Takes kDone shard `param`'s entry out of done_ (newest first: a shard gathered again is
  // usually one done recently), recycling its event; `wait`: after the event completes (the
  // buffer is about to change). Its buffer stays allocated.
  void DropDoneEntry(size_t param, bool wait = false) {
    for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
      if (it->param != param || !Live(*it)) continue;
      if (wait) it->event.Synchronize().IgnoreError();  // a stream error surfaces at its sync
      free_events_.push_back(std::move(it->event));
      done_.erase(std::next(it).base());
      break;
    }
    ++slots_[param].seq;  // any entry left is stale
  }

  bool Live(const DoneEntry& d) const {
    const Slot& s = slots_[d.param];
    return s.state == State::kDone && s.seq == d.seq;
  }

  // Frees the range of the oldest kDone shard whose event has completed. Never blocks.
  bool ReclaimCompleted() {
    for (auto it = done_.begin(); it != done_.end();) {
      if (!Live(*it)) {
        free_events_.push_back(std::move(it->event));
        it = done_.erase(it);
        continue;
      }
      Result<bool> ready = it->event.Query();
      // A failed stream: the copy is not going to read the buffer any more either.
      if (!ready.ok() || *ready) {
        DoneEntry d = std::move(*it);
        done_.erase(it);
        ReleaseDone(d).IgnoreError();  // a kDone shard has no I/O in flight
        return true;
      }
      ++it;
    }
    return false;
  }

  // Frees some buffer range, blocking if it must (Note [Lazy release]); false if every range
  // holds an acquired shard (or `keep`).
  Result<bool> MakeRoom(size_t keep) {
    if (!writing_.empty()) {  // the oldest write has had the longest to finish
      STRATA_RETURN_IF_ERROR(FlushOne(writing_.front()));
      return true;
    }
    if (ReclaimCompleted()) return true;
    while (!done_.empty()) {
      DoneEntry d = std::move(done_.front());
      done_.pop_front();
      if (!Live(d)) {
        free_events_.push_back(std::move(d.event));
        continue;
      }
      d.event.Synchronize().IgnoreError();  // a stream error surfaces at the stream's sync
      STRATA_RETURN_IF_ERROR(ReleaseDone(d));
      return true;
    }
    for (size_t p : filling_) {  // the oldest fill is written as it is (then flushed above)
      if (p == keep) continue;
      STRATA_RETURN_IF_ERROR(FinishFill(p));
      return true;
    }
    for (auto it = prefetched_.rbegin(); it != prefetched_.rend(); ++it) {
      const size_t p = *it;
      if (p == keep) continue;
      prefetched_.erase(std::next(it).base());
      slots_[p].state = State::kIdle;
      const ParamId id = static_cast<ParamId>(p);
      // Waits for the read; a failed read is dropped with the buffer (Acquire reads again).
      swapper_->Release({&id, 1}).IgnoreError();
      return true;
    }
    return false;
  }

  // Runs `fn` (a swapper call that needs buffer room) until it does not fail for lack of room.
  template <typename Fn>
  Status WithRoom(size_t param, Fn fn) {
    for (;;) {
      Status st = fn();
      if (st.code() != StatusCode::kOutOfMemory) return st;
      STRATA_ASSIGN_OR_RETURN(bool freed, MakeRoom(param));
      if (!freed) {
        return st.WithContext(
            Where(param, "buffer") +
            ": every offload_param swap buffer holds an acquired shard (raise "
            "offload_param.buffer_count or buffer_size, or lower stage3_max_live_parameters)");
      }
    }
  }

  // Copies `count` elements from `src` into shard `param` at element `offset` and starts writing
  // the shard (finished by FlushOne: from Acquire, MakeRoom, Prefetch, Write or Drain).
  Status WriteOne(size_t param, size_t offset, size_t count, const uint8_t* src) {
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
  Status BeginFill(size_t param, size_t offset, size_t count, bool base_valid) {
    Slot& s = slots_[param];
    s.state = State::kFilling;
    s.filled.clear();
    s.base_valid = base_valid;
    filling_.push_back(param);
    return AddFilled(param, offset, count);
  }

  // Records [offset, offset + count) as written; once the ranges cover the shard its write starts.
  Status AddFilled(size_t param, size_t offset, size_t count) {
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
  Status FinishFill(size_t param) {
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
  Status FinishFills() {
    Status first;
    while (!filling_.empty()) {
      Status st = FinishFill(filling_.front());
      if (first.ok()) first = st;
    }
    return first;
  }

  Status WriteInto(size_t param, size_t offset, size_t count, const uint8_t* src) {
    STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Data(static_cast<ParamId>(param)));
    uint8_t* dst = buf.data() + offset * ebytes_;
    if (dst != src) std::memcpy(dst, src, count * ebytes_);  // Note [Shared CPU shards]
    return Status::Ok();
  }

  Status StartWrite(size_t param) {
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
  Status FlushOne(size_t param, bool keep_buffer = false) {
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
  Status FlushWrites() {
    Status first;
    while (!writing_.empty()) {
      Status st = FlushOne(writing_.front());
      if (first.ok()) first = st;
    }
    return first;
  }

  size_t ebytes_ = 4;
  uint64_t cpu_kept_bytes_ = 0;
  uint64_t nvme_bytes_ = 0;
  uint64_t reported_read_ = 0, reported_written_ = 0;  // swapper stats at the last AddTo
  double read_wait_ms_ = 0;                            // Acquire waiting for reads since then
  uint8_t zero_ = 0;                                   // what a zero-sized shard's view points at
  std::unique_ptr<AioHandle> own_aio_;
  std::unique_ptr<ParamSwapper> swapper_;
  // The CPU-kept shards' storage (KeepCpuShards); released by ShareCpuFlat.
  std::unique_ptr<PinnedPool> cpu_pool_;
  PinnedBuffer cpu_storage_;
  std::mutex mu_;  // one thread drives the store; the lock makes a stray second one safe
  std::vector<Slot> slots_;
  std::deque<DoneEntry> done_;      // kDone shards, oldest first (entries may be stale)
  std::vector<size_t> prefetched_;  // kPrefetched shards, oldest first
  std::deque<size_t> writing_;      // kWriting shards, oldest first
  std::vector<size_t> filling_;     // kFilling shards, oldest first
  std::vector<Event> free_events_;  // recycled: Done does not create one per gather
};

}  // namespace

Result<std::unique_ptr<ParamStore>> CreateNvmeParamStore(const ParamStoreOptions& options) {
  auto store = std::make_unique<NvmeParamStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<ParamStore>(std::move(store));
}

}  // namespace strata
