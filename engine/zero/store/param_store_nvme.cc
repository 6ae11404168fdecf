// ParamStore on NVMe (offload_param.device = nvme) through swap/ParamSwapper: one swap tensor per
// parameter shard, read into the swapper's buffer_count x buffer_size pinned buffers when a
// gather needs it (or earlier, on Prefetch), released lazily once the stream that read it has
// passed (Note [Lazy release]); written back asynchronously (Note [Asynchronous write-back] in
// param_store_nvme_write.cc, with the rest of the write path). The class: param_store_nvme_impl.h.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/units.h"
#include "engine/zero/store/param_store.h"
#include "engine/zero/store/param_store_nvme_impl.h"

namespace strata::internal {

// Note [Lazy release]
// Done(i, stream) does not free i's buffer range: the copy that reads it may still be queued on
// `stream`. It records an event there and keeps the range as a cache (a parameter gathered again
// soon, e.g. the last layers of forward at the start of backward, needs no read). Ranges are
// given back only when a read or allocation finds the buffers full: first those whose event has
// completed (oldest first, without blocking), then, only if none has, by waiting for the oldest
// event; as a last resort a prefetched shard nobody has acquired yet is dropped (newest first:
// the furthest from use). Prefetch never waits: it takes completed ranges only and otherwise
// stops issuing reads. So the gather path blocks only when the buffers are truly exhausted.

NvmeParamStore::~NvmeParamStore() {
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

Status NvmeParamStore::Init() {
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
Status NvmeParamStore::KeepCpuShards() {
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

// Note [Shared CPU shards]: with offload_optimizer cpu the engine's updated-parameter staging
// (param_copy) is the flat
// partition the optimizer writes the new parameters into; the shards within max_in_cpu then
// had a second copy here, refreshed by a memcpy of every updated element at each step (from
// the engine thread, during backward with the overlapped step: ~16 ms a step of the balanced
// bench/overlap, 135 MB). Moved into that flat array, a shard is the staging range itself and
// its Write copies nothing. What makes it safe: the staging only ever holds the parameters the
// store is about to hold (an update, a restore from a kept copy, a load), and an update runs
// only once a shard's last use of the pass has passed (its gradient is complete).
Status NvmeParamStore::ShareCpuFlat(void* flat) {
  std::lock_guard lock(mu_);
  const std::vector<ShardSlice>& slices = options_.layout->slices();
  auto* base = static_cast<uint8_t*>(flat);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.registered || !s.in_cpu) continue;
    if (s.state != State::kIdle) {
      return FailedPreconditionError(Where(i, "share CPU storage") + ": the shard is in use");
    }
    STRATA_RETURN_IF_ERROR(
        swapper_->AdoptCpuStorage(static_cast<ParamId>(i), base + slices[i].flat_offset * ebytes_));
  }
  cpu_storage_.Release();  // the store's own storage (KeepCpuShards) is no longer used
  cpu_pool_.reset();
  cpu_kept_bytes_ = 0;  // the flat array's owner counts them
  return Status::Ok();
}

Status NvmeParamStore::DoPrefetch(std::span<const size_t> params) {
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

Result<ShardView> NvmeParamStore::DoAcquire(size_t param) {
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

Status NvmeParamStore::Done(size_t param, const Stream& stream) {
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

void NvmeParamStore::AddTo(StepBreakdown* b) {
  std::lock_guard lock(mu_);
  const ParamSwapperStats st = swapper_->stats();
  b->nvme_read_bytes += st.bytes_read - reported_read_;
  b->nvme_write_bytes += st.bytes_written - reported_written_;
  b->io_wait_ms += read_wait_ms_;
  reported_read_ = st.bytes_read;
  reported_written_ = st.bytes_written;
  read_wait_ms_ = 0;
}

Status NvmeParamStore::Check(size_t param) const {
  if (param >= slots_.size()) {
    return InvalidArgumentError("offload_param nvme: no parameter " + std::to_string(param) +
                                " (the layout has " + std::to_string(slots_.size()) + ")");
  }
  return Status::Ok();
}

std::string NvmeParamStore::Where(size_t param, const char* what) const {
  return "offload_param nvme: " + std::string(what) + " of parameter shard " +
         std::to_string(param);
}

Status NvmeParamStore::AllocateZeroed(size_t param) {
  const ParamId id = static_cast<ParamId>(param);
  STRATA_ASSIGN_OR_RETURN(std::span<uint8_t> buf, swapper_->Allocate(id));
  std::memset(buf.data(), 0, buf.size());
  return Status::Ok();
}

void NvmeParamStore::Unprefetch(size_t param) {
  auto it = std::find(prefetched_.begin(), prefetched_.end(), param);
  if (it != prefetched_.end()) prefetched_.erase(it);
}

// Gives the buffer range of a kDone shard back (its event must have completed).
Status NvmeParamStore::ReleaseDone(DoneEntry& d) {
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
void NvmeParamStore::DropDoneEntry(size_t param, bool wait) {
  for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
    if (it->param != param || !Live(*it)) continue;
    if (wait) it->event.Synchronize().IgnoreError();  // a stream error surfaces at its sync
    free_events_.push_back(std::move(it->event));
    done_.erase(std::next(it).base());
    break;
  }
  ++slots_[param].seq;  // any entry left is stale
}

bool NvmeParamStore::Live(const DoneEntry& d) const {
  const Slot& s = slots_[d.param];
  return s.state == State::kDone && s.seq == d.seq;
}

// Frees the range of the oldest kDone shard whose event has completed. Never blocks.
bool NvmeParamStore::ReclaimCompleted() {
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
Result<bool> NvmeParamStore::MakeRoom(size_t keep) {
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

}  // namespace strata::internal

namespace strata {

Result<std::unique_ptr<ParamStore>> CreateNvmeParamStore(const ParamStoreOptions& options) {
  auto store = std::make_unique<internal::NvmeParamStore>(options);
  STRATA_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<ParamStore>(std::move(store));
}

}  // namespace strata
