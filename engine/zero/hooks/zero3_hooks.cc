#include "engine/zero/hooks/zero3_hooks.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/trace.h"
#include "core/units.h"
#include "offload/device/api/kernels.h"

namespace strata {

namespace {
constexpr size_t kMaxTimedH2d = 4096;  // timing event pairs kept between two steps
}  // namespace

Result<std::unique_ptr<ZeroHooks>> ZeroHooks::Create(nn::Module& root, const ZeroHooksOptions& o) {
  if (o.comm == nullptr || o.device == nullptr || o.layout == nullptr ||
      (o.reducer == nullptr && !o.forward_only) || (o.partition_params && o.store == nullptr)) {
    return InvalidArgumentError(
        "zero hooks: communicator, device, layout, reducer (unless forward_only; and shards at "
        "stage 3) are required");
  }
  std::unique_ptr<ZeroHooks> h(new ZeroHooks(o));
  h->state_.resize(o.params.size());
  for (nn::Module* m : root.Modules()) {
    std::vector<size_t> used;
    auto add = [&](const nn::Parameter* p) -> Status {
      if (p->index() < 0 || static_cast<size_t>(p->index()) >= o.params.size() ||
          o.params[static_cast<size_t>(p->index())] != p) {
        return InvalidArgumentError("zero hooks: module " + m->name() + " uses parameter " +
                                    p->name() + ", which is not one of the model's parameters");
      }
      const size_t i = static_cast<size_t>(p->index());
      if (std::find(used.begin(), used.end(), i) == used.end()) used.push_back(i);
      return Status::Ok();
    };
    for (const nn::Parameter* p : m->own_parameters()) STRATA_RETURN_IF_ERROR(add(p));
    for (const nn::Parameter* p : m->external_parameters()) STRATA_RETURN_IF_ERROR(add(p));
    for (size_t i : used) ++h->state_[i].users;
    if (!used.empty()) h->uses_[m] = std::move(used);
  }
  if (o.partition_params) {
    for (size_t i = 0; i < o.params.size(); ++i) {
      nn::Parameter* p = o.params[i];
      p->set_data(nullptr);
      p->set_grad(nullptr, DType::kFloat32);
      h->state_[i].persistent = p->numel() <= o.persistence_threshold;
    }
    ParamCoordinatorOptions co;
    co.comm = o.comm;
    co.device = o.device;
    co.compute = o.compute;
    co.store = o.store;
    co.dtype_bytes = DTypeBytes(o.dtype);
    for (const ShardSlice& s : o.layout->slices()) {
      co.numel.push_back(s.numel);
      co.shard_bytes.push_back(s.shard_numel * co.dtype_bytes);
    }
    co.prefetch_bucket_numel = o.prefetch_bucket_numel;
    co.max_live_numel = o.max_live_numel;
    co.max_reuse_distance_numel = o.max_reuse_distance_numel;
    co.eager_read_ahead = o.forward_only;
    if (o.store != nullptr && o.store->tier() == Tier::kNvme) {
      const ParamStoreOptions& so = o.store->options();
      const AioOptions& a = so.aio != nullptr ? so.aio->options() : so.aio_options;
      co.min_read_ahead_bytes = static_cast<uint64_t>(a.queue_depth) * a.block_size *
                                static_cast<uint64_t>(a.thread_count);
    }
    h->coord_ = std::make_unique<ParamCoordinator>(co, static_cast<Gatherer*>(h.get()));
    Result<Stream> g = o.device->CreateStream();
    if (!g.ok()) return g.status().WithContext("zero hooks: the gather stream");
    h->gather_ = *g;
    h->pool_ = std::make_unique<GatherPool>(o.device, o.param_limit_bytes);
    h->trace_begin_us_.assign(o.params.size(), 0.0);
  }
  return h;
}

ZeroHooks::~ZeroHooks() {
  o_.compute.Synchronize().IgnoreError();
  if (gather_.valid()) gather_.Synchronize().IgnoreError();
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState& st = state_[i];
    if (st.full != nullptr) o_.device->Free(st.full).IgnoreError();
    if (st.slot != nullptr) o_.device->Free(st.slot).IgnoreError();
    if (o_.partition_params) {
      o_.params[i]->set_data(nullptr);
      o_.params[i]->set_grad(nullptr, DType::kFloat32);
    }
  }
  pool_.reset();  // its free buffers' events completed with the streams
  if (gather_.valid()) o_.device->DestroyStream(gather_).IgnoreError();
}

const std::vector<size_t>& ZeroHooks::ParamsOf(const nn::Module& m) const {
  static const std::vector<size_t> kNone;
  auto it = uses_.find(&m);
  return it == uses_.end() ? kNone : it->second;
}

void ZeroHooks::AddLive(uint64_t bytes) {
  live_bytes_ += bytes;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes());
}

Result<void*> ZeroHooks::AllocateSlot(size_t bytes) {
  if (pool_ != nullptr && pool_->free_bytes() != 0) {
    Result<void*> slot = o_.device->Allocate(bytes);
    if (slot.ok() || slot.status().code() != StatusCode::kOutOfMemory) return slot;
    STRATA_RETURN_IF_ERROR(pool_->Trim());
  }
  // Note [Room behind the frees in flight] (pending_frees.cc): tries, then waits and tries again.
  return AllocateAfterFrees(o_.device, bytes, {&o_.compute, &o_.comm_stream});
}

Status ZeroHooks::OnHook(nn::HookPoint point, nn::Module& module, const nn::RunContext& ctx) {
  (void)ctx;  // gathers go on the gather stream, the rest on the compute stream (= ctx.stream)
  const std::vector<size_t>& used = ParamsOf(module);
  if (used.empty()) return Status::Ok();
  // Deferred updates the worker finished go to the store while the forward runs.
  if (o_.store != nullptr && o_.store->fence() != nullptr) {
    STRATA_RETURN_IF_ERROR(o_.store->fence()->Poll());
  }
  if (o_.partition_params && !in_pass_) STRATA_RETURN_IF_ERROR(BeginPass());
  // Note [Rows only]: a backward that does not read the parameters gathers none.
  const bool backward_reads = module.BackwardReadsParameters();
  static const std::vector<size_t> kNone;
  const std::vector<size_t>& gathered_in_backward = backward_reads ? used : kNone;
  switch (point) {
    case nn::HookPoint::kPreForward:
      if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->BeforeGather(point, module, used));
      own_gather_ = true;  // a gather made here may take only the touched rows
      for (size_t i : used) {
        Status g = Gather(i);
        if (!g.ok()) {
          own_gather_ = false;
          return g;
        }
      }
      own_gather_ = false;
      for (size_t i : used) STRATA_RETURN_IF_ERROR(WaitReady(i));
      if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->AfterGather(used));
      return TraceCompute(module, true);
    case nn::HookPoint::kPostForward:
      STRATA_RETURN_IF_ERROR(TraceCompute(module, false, "forward"));
      if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->BeforeRelease(point, module, used));
      for (size_t i : used) STRATA_RETURN_IF_ERROR(Release(i));
      return Status::Ok();
    case nn::HookPoint::kPreBackward:
      if (o_.forward_only) {
        return FailedPreconditionError("zero hooks: " + module.name() +
                                       ": backward through forward-only (inference) hooks");
      }
      if (coord_ != nullptr) {
        STRATA_RETURN_IF_ERROR(coord_->BeforeGather(point, module, gathered_in_backward));
      }
      for (size_t i : used) {
        if (backward_reads) STRATA_RETURN_IF_ERROR(Gather(i));
        STRATA_RETURN_IF_ERROR(AcquireSlot(i));
      }
      for (size_t i : gathered_in_backward) STRATA_RETURN_IF_ERROR(WaitReady(i));
      if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->AfterGather(gathered_in_backward));
      return TraceCompute(module, true);
    case nn::HookPoint::kPostBackward:
      STRATA_RETURN_IF_ERROR(TraceCompute(module, false, "backward"));
      if (coord_ != nullptr) {
        STRATA_RETURN_IF_ERROR(coord_->BeforeRelease(point, module, gathered_in_backward));
      }
      for (size_t i : used) {
        if (backward_reads) STRATA_RETURN_IF_ERROR(Release(i));
        ParamState& st = state_[i];
        if (++st.backward_seen == st.users) {
          st.backward_seen = 0;
          STRATA_RETURN_IF_ERROR(SlotReady(i));
        }
      }
      return Status::Ok();
  }
  return Status::Ok();
}

// Note [Module spans on the compute stream]
// With a trace, each module that owns parameters gets a span on the "stream compute" track from
// the compute stream reaching its kernels (after the waits for its gathers) to the stream
// finishing them: host functions on the stream record both ends, so the span is the stream's
// time, not the engine thread's (which runs ahead, enqueueing). Beside the gathers' and the
// gradient copies' tracks it shows what each gap on the link waited for. Without a trace nothing
// is enqueued.
Status ZeroHooks::TraceCompute(const nn::Module& module, bool begin, const char* phase) {
  Tracer* tracer = CurrentTracer();
  if (tracer == nullptr || !tracer->enabled()) return Status::Ok();
  if (begin) {
    auto at = std::make_shared<double>(0);
    compute_begin_[&module] = at;
    return o_.compute.LaunchHostFunc([tracer, at] {
      *at = tracer->NowUs();
      return Status::Ok();
    });
  }
  auto it = compute_begin_.find(&module);
  if (it == compute_begin_.end()) return Status::Ok();
  std::shared_ptr<double> at = std::move(it->second);
  compute_begin_.erase(it);
  return o_.compute.LaunchHostFunc([tracer, at, m = &module, phase] {
    tracer->Complete(tracer->Track("stream compute"), m->name(), phase, *at, tracer->NowUs());
    return Status::Ok();
  });
}

Status ZeroHooks::BeginPass() {
  in_pass_ = true;
  if (!pass_event_.valid()) {
    STRATA_ASSIGN_OR_RETURN(pass_event_, o_.device->CreateEvent({.timing = false}));
  }
  STRATA_RETURN_IF_ERROR(pass_event_.Record(o_.compute));
  return gather_.Wait(pass_event_);
}

Result<Event> ZeroHooks::TimingEvent() {
  if (!spare_timing_.empty()) {
    Event e = std::move(spare_timing_.back());
    spare_timing_.pop_back();
    return e;
  }
  return o_.device->CreateEvent({.timing = true});
}

Status ZeroHooks::Gather(size_t i) {
  if (!o_.partition_params) return Status::Ok();
  ParamState& st = state_[i];
  if (st.gathered > 0 && st.rows_only) {  // Note [Rows only]: its buffer is its one forward's
    return InternalError("zero hooks: " + o_.params[i]->name() +
                         " was gathered as its touched rows and is wanted again before release");
  }
  if (st.persistent) {
    if (!st.stale) return Status::Ok();
    st.stale = false;
    return RefillPersistent(i);  // its deferred update is awaited by Fill
  }
  if (st.gathered++ > 0) return Status::Ok();
  return Fill(i, gather_);
}

Status ZeroHooks::WaitReady(size_t i) {
  ParamState& st = state_[i];
  if (!st.wait_pending) return Status::Ok();
  st.wait_pending = false;
  return o_.compute.Wait(st.ready);
}

// Note [Gather stream]: Fill runs on the gather stream for every non-persistent gather (taken
// ahead by the coordinator or by the module itself); the compute stream waits for `ready` at the
// pre hook of the module (WaitReady), or at the release of a gather no module used, so the
// release's event on the compute stream always follows the gather's writes.
Status ZeroHooks::Fill(size_t i, const Stream& g) {
  // Note [Deferred updates] (engine/overlap/step_overlap_defer.cc): the shard must hold its update.
  if (ParamFence* fence = o_.store->fence(); fence != nullptr && fence->Pending(i)) {
    STRATA_RETURN_IF_ERROR(fence->Await(i).WithContext("gathering " + o_.params[i]->name()));
  }
  ParamState& st = state_[i];
  nn::Parameter* p = o_.params[i];
  const ShardSlice& s = o_.layout->slices()[i];
  const size_t cbytes = DTypeBytes(o_.dtype);
  const size_t bytes = s.numel * cbytes;
  // Room for every rank's slot (padding included), so a host shard is gathered in place.
  const size_t padded = s.shard_numel * static_cast<size_t>(o_.comm->world_size()) * cbytes;
  const size_t alloc = o_.store->on_host() ? std::max(bytes, padded) : bytes;
  if (!pool_->pooling())
    STRATA_RETURN_IF_ERROR(pending_frees_.Throttle(param_bytes_, alloc, o_.param_limit_bytes));
  Result<void*> full = pool_->Take(alloc, g, param_bytes_);
  if (!full.ok()) {
    return full.status().WithContext("gathering " + p->name() + " (" + FormatBytes(bytes) + ")");
  }
  st.full = *full;
  st.full_bytes = alloc;
  param_bytes_ += alloc;
  AddLive(alloc);
  gathered_numel_ += s.numel;
  peak_gathered_numel_ = std::max(peak_gathered_numel_, gathered_numel_);
  STRATA_ASSIGN_OR_RETURN(ShardView view, o_.store->Acquire(i));
  const void* shard = view.data;
  const bool on_gather = g == gather_;
  Tracer* tracer = on_gather ? CurrentTracer() : nullptr;
  if (tracer != nullptr && tracer->enabled()) {
    double* begin = &trace_begin_us_[i];
    STRATA_RETURN_IF_ERROR(g.LaunchHostFunc([tracer, begin]() {
      *begin = tracer->NowUs();
      return Status::Ok();
    }));
  } else {
    tracer = nullptr;
  }
  if (view.on_host) {
    // offload_param cpu/nvme: the shard crosses the link straight into its own slot of the
    // gathered buffer (its valid elements: the last rank's slot may pass the parameter's end),
    // then the all-gather runs in place (a no-op at world 1).
    uint8_t* slot = static_cast<uint8_t*>(st.full) + s.param_offset * cbytes;
    const size_t h2d = s.valid_numel * cbytes;
    std::pair<Event, Event> timing;
    // Timed copies are collected at the step (AddTo); a loop of forwards without a step (eval)
    // times only the first kMaxTimedH2d, so the event pairs stay bounded.
    if (on_gather && h2d > 0 && h2d_events_.size() < kMaxTimedH2d) {
      STRATA_ASSIGN_OR_RETURN(timing.first, TimingEvent());
      STRATA_ASSIGN_OR_RETURN(timing.second, TimingEvent());
      STRATA_RETURN_IF_ERROR(timing.first.Record(g));
    }
    st.rows_only = RowsOnly(i);
    if (st.rows_only) {  // Note [Rows only]
      const size_t row_bytes = static_cast<size_t>(p->shape()[1]) * cbytes;
      for (const nn::RowRun& r : nn::RowRuns(p->touched_rows())) {
        const size_t at = static_cast<size_t>(r.first) * row_bytes;
        const size_t n = static_cast<size_t>(r.count) * row_bytes;
        STRATA_RETURN_IF_ERROR(g.CopyAsync(slot + at, static_cast<const uint8_t*>(shard) + at, n,
                                           CopyKind::kHostToDevice));
        h2d_bytes_ += n;
      }
    } else {
      STRATA_RETURN_IF_ERROR(g.CopyAsync(slot, shard, h2d, CopyKind::kHostToDevice));
      h2d_bytes_ += h2d;
    }
    if (timing.second.valid()) {
      STRATA_RETURN_IF_ERROR(timing.second.Record(g));
      h2d_events_.push_back(std::move(timing));
    }
    STRATA_RETURN_IF_ERROR(o_.comm->AllGather(g, slot, st.full, s.numel, o_.dtype, nullptr)
                               .WithContext("all-gather of " + p->name()));
  } else {
    STRATA_RETURN_IF_ERROR(o_.comm->AllGather(g, shard, st.full, s.numel, o_.dtype, nullptr)
                               .WithContext("all-gather of " + p->name()));
  }
  STRATA_RETURN_IF_ERROR(o_.store->Done(i, g));
  if (tracer != nullptr) {
    const int track = tracer->Track("stream gather");
    const double* begin = &trace_begin_us_[i];
    STRATA_RETURN_IF_ERROR(g.LaunchHostFunc([tracer, track, begin, bytes, p]() {
      const TraceArg args[] = {{"bytes", static_cast<double>(bytes)}};
      tracer->Complete(track, "gather", "copy", *begin, tracer->NowUs(), args, "param", p->name());
      return Status::Ok();
    }));
  }
  if (on_gather) {
    if (!st.ready.valid()) {
      STRATA_ASSIGN_OR_RETURN(st.ready, o_.device->CreateEvent({.timing = false}));
    }
    STRATA_RETURN_IF_ERROR(st.ready.Record(g));
    st.wait_pending = true;
  }
  p->set_data(st.full);
  return Status::Ok();
}

// Note [Rows only]
// At one rank the all-gather is a no-op and the gathered buffer is the shard's copy, so a
// parameter whose one user lists the rows its forward touches (Note [Touched rows] in
// nn/tensor/parameter.h: the embedding, the batch's token ids) needs only those rows on the device
// for that forward: the gather the module's own pre-forward hook makes copies them alone (a gather
// taken ahead by the coordinator does not know the rows yet and copies everything), and no
// other reader ever sees the buffer (one user; released at its post-forward). The backward of a
// module that does not read its parameters (Module::BackwardReadsParameters: the embedding's
// scatter-add) gathers nothing, and the coordinator's trace records no parameter for it. For the
// gradient, AcquireSlot asks the reducer whether it takes this pass's contribution of the
// parameter as rows (GradReducer::TakesRows: one rank, the host partition's first write of the
// pass); if so the module zeroes only the touched rows of the fresh slot and the reducer copies
// only them to the host, zeroing the rows it wrote there last time. A vocabulary of 128 K x 4096
// in bf16 is 1 GB each way per step; a batch of 4 K tokens touches at most 32 MB of it.
// Never a persistent parameter's (Note [Persistent rows are every row]).
bool ZeroHooks::RowsOnly(size_t i) const {
  const nn::Parameter* p = o_.params[i];
  return own_gather_ && !state_[i].persistent && o_.comm->world_size() == 1 &&
         state_[i].users == 1 && p->shape().ndim() == 2 && !p->touched_rows().empty();
}

Status ZeroHooks::Release(size_t i) {
  if (!o_.partition_params) return Status::Ok();
  ParamState& st = state_[i];
  if (st.persistent) return Status::Ok();
  if (st.gathered <= 0) {
    return InternalError("zero hooks: release of " + o_.params[i]->name() + " without a gather");
  }
  if (--st.gathered > 0) return Status::Ok();
  // A gather taken ahead that no module used: the release still follows its writes.
  STRATA_RETURN_IF_ERROR(WaitReady(i));
  STRATA_RETURN_IF_ERROR(pool_->Give(st.full, st.full_bytes, o_.compute));
  live_bytes_ -= st.full_bytes;
  param_bytes_ -= st.full_bytes;
  if (!pool_->pooling()) STRATA_RETURN_IF_ERROR(pending_frees_.Note(o_.compute, st.full_bytes));
  gathered_numel_ -= o_.layout->slices()[i].numel;
  st.full = nullptr;
  st.full_bytes = 0;
  st.rows_only = false;
  o_.params[i]->set_data(nullptr);
  return Status::Ok();
}

void ZeroHooks::AddTo(StepBreakdown* b) {
  if (o_.store != nullptr) o_.store->AddTo(b);
  b->h2d_bytes += h2d_bytes_;
  h2d_bytes_ = 0;
  size_t kept = 0;
  for (auto& [begin, end] : h2d_events_) {
    Result<float> ms = Event::ElapsedMs(begin, end);
    if (!ms.ok() && ms.status().code() == StatusCode::kUnavailable) {  // still running
      h2d_events_[kept++] = {std::move(begin), std::move(end)};
      continue;
    }
    if (ms.ok()) b->h2d_ms += *ms;
    spare_timing_.push_back(std::move(begin));
    spare_timing_.push_back(std::move(end));
  }
  h2d_events_.resize(kept);
}

Status ZeroHooks::AcquireSlot(size_t i) {
  if (!o_.partition_params) return Status::Ok();
  ParamState& st = state_[i];
  if (st.slot != nullptr) return Status::Ok();  // a tied parameter's second user
  nn::Parameter* p = o_.params[i];
  const size_t numel = static_cast<size_t>(p->numel());
  STRATA_RETURN_IF_ERROR(
      pending_frees_.Throttle(slot_bytes_, numel * sizeof(float), o_.slot_limit_bytes));
  Result<void*> slot = AllocateSlot(numel * sizeof(float));
  if (!slot.ok()) {
    return slot.status().WithContext("gradient slot of " + p->name() + " (" +
                                     FormatBytes(numel * sizeof(float)) + ")");
  }
  st.slot = static_cast<float*>(*slot);
  AddLive(numel * sizeof(float));
  slot_bytes_ += numel * sizeof(float);
  // Fresh: the first backward contribution writes it (nn/tensor/parameter.h: Note [Fresh gradient
  // slots]); SlotReady zeroes one no module wrote. A 135 MB zeroing pass on the compute stream
  // less per step in bench/overlap's balanced size.
  p->set_grad(st.slot, DType::kFloat32, /*fresh=*/true);
  // Note [Rows only]: the reducer reads only the touched rows of this pass's slot.
  p->set_grad_rows_only(st.users == 1 && p->shape().ndim() == 2 && !p->touched_rows().empty() &&
                        o_.reducer->TakesRows(i));
  return Status::Ok();
}

Status ZeroHooks::SlotReady(size_t i) {
  nn::Parameter* p = o_.params[i];
  // A slot still fresh was not written by this pass (Note [Fresh gradient slots]): its gradient
  // is zero.
  STRATA_RETURN_IF_ERROR(nn::ZeroGradIfFresh(o_.compute, *p));
  if (p->grad_rows_only()) {  // Note [Rows only]
    const std::span<const int32_t> rows = p->touched_rows();
    STRATA_RETURN_IF_ERROR(o_.reducer->Ready(i, static_cast<float*>(p->grad()),
                                             std::vector<int32_t>(rows.begin(), rows.end()),
                                             static_cast<size_t>(p->shape()[1])));
  } else {
    STRATA_RETURN_IF_ERROR(o_.reducer->Ready(i, static_cast<float*>(p->grad())));
  }
  p->set_grad_rows_only(false);
  if (o_.partition_params) p->set_grad(nullptr, DType::kFloat32);  // the reducer frees it
  return Status::Ok();
}

Status ZeroHooks::SlotDone(const Stream& stream, size_t i, float* slot) {
  const size_t numel = o_.layout->slices()[i].numel;
  if (!o_.partition_params) return LaunchFill(stream, slot, DType::kFloat32, 0.0f, numel);
  STRATA_RETURN_IF_ERROR(o_.device->FreeAsync(stream, slot));
  live_bytes_ -= numel * sizeof(float);
  slot_bytes_ -= numel * sizeof(float);
  STRATA_RETURN_IF_ERROR(pending_frees_.Note(stream, numel * sizeof(float)));
  state_[i].slot = nullptr;
  return Status::Ok();
}

Status ZeroHooks::FinishBackward() {
  if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->EndPass());
  in_pass_ = false;
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState& st = state_[i];
    if (st.backward_seen == 0) continue;  // complete (reduced) or not used in this backward
    st.backward_seen = 0;
    STRATA_RETURN_IF_ERROR(SlotReady(i));
  }
  return o_.reducer->Flush();
}

Status ZeroHooks::FinishForward() {
  if (!o_.forward_only)
    return FailedPreconditionError("zero hooks: FinishForward is for inference");
  if (coord_ != nullptr) STRATA_RETURN_IF_ERROR(coord_->EndPass());
  in_pass_ = false;
  return Status::Ok();
}

// Note [Persistent rows are every row]
// A persistent parameter is gathered once and read by every later forward, so its gather takes
// every row. After a step whose updates were deferred, its re-gather runs at its next use, inside
// the pre-forward hook of the module using it, where a gather may take only the touched rows
// (Note [Rows only]); the embedding, persistent under DeepSpeed's default
// stage3_param_persistence_threshold (1e5 elements) in a small model, then kept only the first
// micro-batch's rows fresh, and the next micro-batch of the step read the old values of its other
// rows: the step's losses and updates differed from the serial step's (tests/engine/overlap's
// deferred matrix at that threshold: every case with gradient accumulation 2).

// Note [Persistent re-gathers in the same order on every rank]
// After a step whose updates were deferred, every persistent parameter is re-gathered at its
// next use, not only those still pending: whether an update is still pending depends on this
// rank's timing, and a re-gather is a collective. Re-gathering the finished ones at once and the
// pending ones later issued the all_gathers in a different order on each rank
// (engine_grad_region_mpi_world2 failed about 1 run in 10: "mismatched collective", with
// strata.comm_check_sizes). At the next use the order is the forward's, the same everywhere.
// Whether a step deferred is the same on every rank (the configuration and the agreed norm and
// overflow decide it).
Status ZeroHooks::RegatherPersistent(bool at_next_use) {
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState& st = state_[i];
    if (!st.persistent) continue;
    st.stale = at_next_use;  // re-gathered by Gather
    if (!st.stale) STRATA_RETURN_IF_ERROR(RefillPersistent(i));
  }
  return Status::Ok();
}

Status ZeroHooks::RefillPersistent(size_t i) {
  ParamState& st = state_[i];
  if (st.full != nullptr) {  // gathered already: refresh from the new shards
    STRATA_RETURN_IF_ERROR(pool_->Give(st.full, st.full_bytes, o_.compute));
    live_bytes_ -= st.full_bytes;
    param_bytes_ -= st.full_bytes;
    if (!pool_->pooling()) STRATA_RETURN_IF_ERROR(pending_frees_.Note(o_.compute, st.full_bytes));
    st.full = nullptr;
    st.full_bytes = 0;
  }
  // On the compute stream: the step wrote the shards there, and nothing runs ahead to overlap.
  st.gathered = 1;
  const uint64_t numel = gathered_numel_, peak = peak_gathered_numel_;
  Status s = Fill(i, o_.compute);
  gathered_numel_ = numel;  // persistent elements are not counted as live gathers
  peak_gathered_numel_ = peak;
  st.gathered = 0;
  return s;
}

}  // namespace strata
