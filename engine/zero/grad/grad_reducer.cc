#include "engine/zero/grad/grad_reducer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "core/trace.h"
#include "core/units.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/kernels.h"

namespace strata {

namespace {
constexpr size_t kMaxTimedCopies = 4096;  // timing event pairs kept between two steps
}  // namespace

// Note [Reducing into host memory]
// With a host target each reduced shard (recv_, device memory, reused by the next reduce) is
// copied D2H on the stream that ran the reduce into one of kGradStagingBuffers pinned staging
// buffers, in chunks of at most staging_numel elements; a host function on the reducer's own
// add stream, after an event on the reduce stream, adds the chunk into host_partition (+=, fp32,
// element by element: the device add computes a + 1.0f * b, the same bits). Before a staging
// buffer is reused the reduce stream waits for its previous add, so the ring never overwrites a
// chunk not yet added, while the next reduce-scatter and D2H go on during an add. Adds run in
// enqueue order on one stream, so each element gets its += in the order the device add would
// (gradient accumulation keeps accumulating on the host). Flush makes the compute stream wait for
// the add stream; the engine's step synchronizes it before reading the host array, and the
// overlapped step's listener gets the add stream (its event follows the add).

// Note [Copy first]
// Zeroing the host partition after every step and adding each reduced shard into it through the
// staging ring costs three passes over each gradient besides the D2H (the memset, the staging
// copy, the add). When the owner marks the array stale instead (MarkHostStale, from
// Engine::ZeroGradients), the next pass copies each parameter's host range straight from the
// reduced shard into host_partition on the reduce stream (one D2H, no staging, no add) and, at
// Flush, zeroes the ranges of the parameters it never reduced; later micro-batches of the same
// step add as before. 0 + x and x are the same float for every x but -0.0 (the add gives +0.0,
// the copy keeps -0.0). Adam / AdamW and Lion never see the difference: a moment starts at +0.0,
// so b * m + (1 - b) * (-0.0) is b * m or +0.0, the same as with +0.0, and their updates read
// only the moments (and the parameter); Adagrad divides the gradient itself, so the engine keeps
// zeroing for it. A parameter reduced twice in one pass is copied the first time and added the
// second; the reduce stream then waits for that add, so an event on the reduce stream after the
// last parameter of a pass covers every write of the pass (the overlapped step's listener).
//
// One rank: a reduce-scatter over one rank is a copy of the slot, so the slot itself is read.

// Note [Four half buffers]
// A D2H into a staging buffer waits for the add of the buffer's previous chunk. With two buffers
// of a whole bucket shard each the copy could run one chunk ahead of the add, and the add's host
// thread shares the cores with the compute, the CPU Adam and the link copies: in bench/overlap's
// io size with every state resident the gradient D2H (the backward's bottleneck on the link)
// waited 12.9 ms a step for adds. Four buffers of half the size hold the same pinned bytes (above
// the minimum) and let the copy run three half chunks ahead.
size_t GradStagingNumel(size_t max_shard_numel, size_t bucket_numel, int world) {
  const size_t largest = std::max<size_t>(max_shard_numel, 1);
  size_t whole = largest;
  if (bucket_numel != 0) {
    const size_t w = static_cast<size_t>(std::max(world, 1));
    whole = std::min(largest, (bucket_numel + w - 1) / w);
  }
  return std::min(largest, std::max((whole + 1) / 2, kGradStagingMinNumel));
}

Result<std::unique_ptr<GradReducer>> GradReducer::Create(const GradReducerOptions& options) {
  if (options.host_partition != nullptr && options.host_target != nullptr) {
    return InvalidArgumentError("gradient reducer: a host partition or a host target, not both");
  }
  const bool host = options.host_partition != nullptr || options.host_target != nullptr;
  const bool needs_device = !host || options.host_begin > 0;
  if (options.comm == nullptr || options.device == nullptr || options.layout == nullptr ||
      (needs_device && options.partition == nullptr) || !options.compute.valid() ||
      (options.overlap && !options.comm_stream.valid())) {
    return InvalidArgumentError(
        "gradient reducer: communicator, device, streams, layout and "
        "partition are required");
  }
  if (host && options.host_begin > options.layout->partition_numel()) {
    return InvalidArgumentError("gradient reducer: host_begin " +
                                std::to_string(options.host_begin) + " past the partition (" +
                                std::to_string(options.layout->partition_numel()) + " elements)");
  }
  std::unique_ptr<GradReducer> r(new GradReducer(options));
  size_t max_shard = 1;
  for (const ShardSlice& s : options.layout->slices())
    max_shard = std::max(max_shard, s.shard_numel);
  const size_t bytes = max_shard * sizeof(float);
  Result<void*> mem = options.device->Allocate(bytes);
  if (!mem.ok()) {
    return mem.status().WithContext("engine: reduce-scatter buffer (" + FormatBytes(bytes) + ")");
  }
  r->recv_ = *mem;
  EventOptions eo;
  eo.timing = false;
  STRATA_ASSIGN_OR_RETURN(r->compute_done_, options.device->CreateEvent(eo));
  STRATA_ASSIGN_OR_RETURN(r->comm_done_, options.device->CreateEvent(eo));
  if (host) STRATA_RETURN_IF_ERROR(r->InitHostTarget());
  return r;
}

Status GradReducer::InitHostTarget() {
  if (o_.host_target != nullptr) {
    target_ = o_.host_target;
  } else {
    own_target_ = std::make_unique<HostArrayGradTarget>(o_.host_partition, o_.host_begin);
    target_ = own_target_.get();
  }
  size_t max_shard = 1;
  for (const ShardSlice& s : o_.layout->slices()) max_shard = std::max(max_shard, s.shard_numel);
  staging_numel_ = GradStagingNumel(max_shard, o_.bucket_numel, o_.layout->world());
  PinnedPoolOptions po;
  po.buffer_bytes = staging_numel_ * sizeof(float);
  po.buffer_count = kGradStagingBuffers;
  po.lock = o_.pin_memory;
  po.device = o_.device;
  po.budget = o_.budget;
  po.name = "gradient staging (reduce -> host)";
  STRATA_ASSIGN_OR_RETURN(staging_pool_, PinnedPool::Create(po));
  for (size_t i = 0; i < kGradStagingBuffers; ++i) staging_.push_back(staging_pool_->Acquire());
  EventOptions eo;
  eo.timing = false;
  for (size_t i = 0; i < kGradStagingBuffers; ++i) {
    STRATA_ASSIGN_OR_RETURN(Event c, o_.device->CreateEvent(eo));
    STRATA_ASSIGN_OR_RETURN(Event a, o_.device->CreateEvent(eo));
    copied_.push_back(std::move(c));
    added_.push_back(std::move(a));
  }
  STRATA_ASSIGN_OR_RETURN(add_done_, o_.device->CreateEvent(eo));
  STRATA_ASSIGN_OR_RETURN(add_to_reduce_, o_.device->CreateEvent(eo));
  STRATA_ASSIGN_OR_RETURN(add_stream_, o_.device->CreateStream());
  return Status::Ok();
}

GradReducer::~GradReducer() {
  if (o_.overlap) o_.comm_stream.Synchronize().IgnoreError();
  o_.compute.Synchronize().IgnoreError();
  if (add_stream_.valid()) o_.device->DestroyStream(add_stream_).IgnoreError();
  staging_.clear();  // the leases go back before the pool
  if (recv_ != nullptr) o_.device->Free(recv_).IgnoreError();
}

uint64_t GradReducer::cpu_bytes() const {
  return staging_pool_ != nullptr ? staging_pool_->buffer_bytes() * staging_pool_->buffer_count()
                                  : 0;
}

Status GradReducer::Ready(size_t param, float* slot) { return Ready(param, slot, {}, 0); }

bool GradReducer::TakesRows(size_t param) const {
  if (target_ == nullptr || o_.comm->world_size() != 1) return false;
  const ShardSlice& sl = o_.layout->slices()[param];
  if (sl.flat_offset < o_.host_begin) return false;
  if (o_.host_partition != nullptr) {  // Note [Rows to host]: the stale pass's first write
    if (!host_stale_ || host_written_[param] != 0) return false;
  } else if (!target_first_pass_ || host_written_.empty() || host_written_[param] != 0) {
    // Note [Rows to the region]: the step's first pass, the parameter not sent yet
    return false;
  }
  // A parameter already queued in this pass would be added, not copied.
  return std::none_of(queue_.begin(), queue_.end(),
                      [&](const Queued& q) { return q.param == param; });
}

Status GradReducer::Ready(size_t param, float* slot, std::vector<int32_t> rows, size_t row_numel) {
  if (!rows.empty()) {
    const size_t numel = o_.layout->slices()[param].numel;
    if (!TakesRows(param) || row_numel == 0 || numel % row_numel != 0 ||
        static_cast<size_t>(rows.back()) >= numel / row_numel) {
      return InternalError("gradient reducer: parameter " + std::to_string(param) +
                           " handed as rows where whole slots are needed, or rows past its end");
    }
  }
  queue_.push_back({param, slot, std::move(rows), row_numel});
  queued_numel_ += o_.layout->slices()[param].numel;
  const bool hint = flush_hint_ && flush_hint_(param);  // asked for every parameter
  // One rank has nothing to communicate: a bucket would only hold the slot and delay its copy
  // to the host (the optimizer overlapped with backward waits for it), so each slot goes alone.
  const bool alone = o_.comm->world_size() == 1 && !o_.bucket_one_rank;
  if (alone || queued_numel_ >= o_.bucket_numel || hint) return ReduceBucket();
  return Status::Ok();
}

void GradReducer::MarkHostStale() {
  if (o_.host_partition == nullptr) return;
  host_stale_ = true;
  host_written_.assign(o_.layout->slices().size(), 0);
}

Result<GradReducer::CopyTiming*> GradReducer::NextCopyTiming() {
  if (copy_events_used_ >= kMaxTimedCopies) return nullptr;
  if (copy_events_used_ == copy_events_.size()) {  // made on the first step, reused after
    STRATA_ASSIGN_OR_RETURN(Event b, o_.device->CreateEvent());
    STRATA_ASSIGN_OR_RETURN(Event e, o_.device->CreateEvent());
    copy_events_.emplace_back(std::move(b), std::move(e));
  }
  return &copy_events_[copy_events_used_++];
}

namespace {

// A reduced gradient's D2H copy on `s`. With a trace: a span per copy on its own track, from the
// stream reaching it to the copy's (paced) end, so the link's D2H side is visible beside the
// gathers - into the host partition or into a staging buffer for a target (the NVMe region).
Status TracedGradientCopy(const Stream& s, float* dst, const float* src, size_t bytes) {
  Tracer* tracer = CurrentTracer();
  std::shared_ptr<double> begin_us;
  if (tracer != nullptr && tracer->enabled()) {
    begin_us = std::make_shared<double>(0);
    STRATA_RETURN_IF_ERROR(s.LaunchHostFunc([tracer, begin_us] { *begin_us = tracer->NowUs(); }));
  }
  STRATA_RETURN_IF_ERROR(s.CopyAsync(dst, src, bytes, CopyKind::kDeviceToHost));
  if (begin_us != nullptr) {
    STRATA_RETURN_IF_ERROR(s.LaunchHostFunc([tracer, begin_us, bytes] {
      const TraceArg args[] = {{"bytes", static_cast<double>(bytes)}};
      tracer->Complete(tracer->Track("stream reduce d2h"), "gradient d2h", "copy", *begin_us,
                       tracer->NowUs(), args);
    }));
  }
  return Status::Ok();
}

}  // namespace

Status GradReducer::CopyToHost(const Stream& s, const float* shard, const ShardSlice& sl, size_t lo,
                               size_t hi) {
  float* dst = o_.host_partition + (sl.flat_offset + lo - o_.host_begin);
  const size_t bytes = (hi - lo) * sizeof(float);
  STRATA_ASSIGN_OR_RETURN(CopyTiming * timing, NextCopyTiming());
  if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->first.Record(s));
  STRATA_RETURN_IF_ERROR(TracedGradientCopy(s, dst, shard + lo, bytes));
  if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->second.Record(s));
  copy_bytes_ += bytes;
  return Status::Ok();
}

// Note [Rows to host]
// An embedding's gradient is nonzero only in the rows of the batch's tokens (Note [Touched rows]
// in nn/tensor/parameter.h); at one rank, in the copy-first pass, the slot's other rows are not
// even zeroed (Note [Rows only] in engine/zero/hooks/zero3_hooks.cc). So only the touched rows
// cross the link, straight into host_partition (one D2H per run of consecutive rows); before them,
// a host function on the same stream zeroes the rows that may be nonzero there: those the last
// rows-only copy wrote (host_rows_), or the whole range the first time or after a whole write.
// Each host element then holds what a copy of the whole slot would have put there, bit for bit
// (the slot's untouched rows would be +0.0, as the zeroed ones are). Nothing else makes a row
// of the host part nonzero between passes (the optimizer reads it; a scale keeps zeros zero),
// so the tracked rows stay a superset of the nonzero ones.
Status GradReducer::CopyRowsToHost(const Stream& s, const float* slot, const ShardSlice& sl,
                                   size_t param, const std::vector<int32_t>& rows,
                                   size_t row_numel) {
  if (host_rows_known_.empty()) {
    host_rows_known_.assign(o_.layout->slices().size(), 0);
    host_rows_.resize(o_.layout->slices().size());
  }
  float* base = o_.host_partition + (sl.flat_offset - o_.host_begin);
  if (host_rows_known_[param] != 0) {
    STRATA_RETURN_IF_ERROR(
        s.LaunchHostFunc([base, row_numel, old = std::move(host_rows_[param])]() {
          for (int32_t r : old) {
            std::memset(base + static_cast<size_t>(r) * row_numel, 0, row_numel * sizeof(float));
          }
          return Status::Ok();
        }));
  } else {
    const size_t numel = sl.numel;
    STRATA_RETURN_IF_ERROR(s.LaunchHostFunc([base, numel]() {
      std::memset(base, 0, numel * sizeof(float));
      return Status::Ok();
    }));
  }
  STRATA_ASSIGN_OR_RETURN(CopyTiming * timing, NextCopyTiming());
  if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->first.Record(s));
  for (const nn::RowRun& r : nn::RowRuns(rows)) {
    const size_t at = static_cast<size_t>(r.first) * row_numel;
    const size_t n = static_cast<size_t>(r.count) * row_numel;
    STRATA_RETURN_IF_ERROR(
        s.CopyAsync(base + at, slot + at, n * sizeof(float), CopyKind::kDeviceToHost));
    copy_bytes_ += n * sizeof(float);
  }
  if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->second.Record(s));
  host_rows_[param] = rows;
  host_rows_known_[param] = 1;
  return Status::Ok();
}

// Note [Rows to the region]
// The NVMe gradient region (a GradTarget with no flat array) takes an embedding's gradient as rows
// too: without them its whole slot crossed the link at the end of every backward, the step's
// last D2H before the first sub-group's update (16.8 MB, 5.6 ms in bench/overlap's io size, for
// the 16 rows a batch touched). Only in the step's first pass and before anything else wrote the
// parameter's elements there (target_first_pass_, host_written_): they are +0.0 in the region
// then, as a whole slot's untouched rows would make them (the first pass adds into zeros, and
// +0.0 + +0.0 is +0.0), so leaving them untouched keeps every bit. The rows' runs, last first
// (the region fills its chunks from the top down: Note [Copy into a fresh chunk] in
// engine/nvme/grad_region.cc), are copied D2H packed into the staging ring, each buffer's runs
// added by one host function on the add stream; before them, AddZeros counts the elements between
// the runs, so the region's per-chunk counts (Note [A chunk is done when its adds are]) are the
// same whatever rows a batch touches.
Status GradReducer::AddRowsToTarget(const Stream& s, const float* slot, const ShardSlice& sl,
                                    const std::vector<int32_t>& rows, size_t row_numel) {
  const std::vector<nn::RowRun> runs = nn::RowRuns(rows);
  std::vector<std::pair<size_t, size_t>> zeros;   // flat begin, elements: the rows between runs
  std::vector<std::pair<size_t, size_t>> ranges;  // the runs' elements in the slot, [lo, hi)
  size_t below = sl.numel;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const size_t lo = static_cast<size_t>(it->first) * row_numel;
    const size_t hi = static_cast<size_t>(it->first + it->count) * row_numel;
    if (hi < below) zeros.emplace_back(sl.flat_offset + hi, below - hi);
    ranges.emplace_back(lo, hi);
    below = lo;
  }
  if (below > 0) zeros.emplace_back(sl.flat_offset, below);
  STRATA_RETURN_IF_ERROR(add_stream_.LaunchHostFunc([target = target_, zeros = std::move(zeros)] {
    for (const auto& [flat, n] : zeros) STRATA_RETURN_IF_ERROR(target->AddZeros(flat, n));
    return Status::Ok();
  }));
  return StageAndAdd(s, slot, sl.flat_offset, ranges);
}

void GradReducer::ZeroUnwritten() {
  const std::vector<ShardSlice>& slices = o_.layout->slices();
  for (size_t p = 0; p < slices.size(); ++p) {
    const ShardSlice& sl = slices[p];
    if (host_written_[p] != 0) continue;
    const size_t lo = std::max(sl.flat_offset, o_.host_begin);
    const size_t hi = sl.flat_offset + sl.shard_numel;
    if (lo < hi)
      std::memset(o_.host_partition + (lo - o_.host_begin), 0, (hi - lo) * sizeof(float));
  }
}

// Note [Reducing into host memory]. The ranges' elements are staged last first: the host target
// fills from its end down (Note [Write-behind] in engine/nvme/grad_region.cc); the pieces are
// disjoint, so their order changes no value. Pieces share a staging buffer while it has room (the
// rows of an embedding: Note [Rows to the region]), and one host function adds a buffer's pieces.
Status GradReducer::StageAndAdd(const Stream& s, const float* src, size_t flat_base,
                                std::span<const std::pair<size_t, size_t>> ranges_last_first) {
  struct Piece {
    size_t flat = 0, at = 0, n = 0;  // flat element, offset in the staging buffer, elements
  };
  std::vector<Piece> pieces;
  size_t k = 0, used = 0;
  CopyTiming* timing = nullptr;
  auto add_staged = [&]() -> Status {
    if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->second.Record(s));
    STRATA_RETURN_IF_ERROR(copied_[k].Record(s));
    STRATA_RETURN_IF_ERROR(add_stream_.Wait(copied_[k]));
    STRATA_RETURN_IF_ERROR(add_stream_.LaunchHostFunc(
        [target = target_, stage = static_cast<const float*>(staging_[k].data()),
         pieces = std::move(pieces)] {
          Tracer* t = CurrentTracer();
          if (t != nullptr) t->NameThisThreadIfUnnamed("stream grad add");
          TraceSpan span(t, "host grad add", "copy");
          for (const Piece& p : pieces) {
            STRATA_RETURN_IF_ERROR(target->Add(p.flat, stage + p.at, p.n));
          }
          return Status::Ok();
        }));
    STRATA_RETURN_IF_ERROR(added_[k].Record(add_stream_));
    add_pending_ = true;
    pieces.clear();
    used = 0;
    return Status::Ok();
  };
  for (const auto& [lo, top] : ranges_last_first) {
    for (size_t hi = top; hi > lo;) {
      if (pieces.empty()) {  // a staging buffer for the next pieces
        k = next_staging_;
        next_staging_ = (next_staging_ + 1) % staging_.size();
        STRATA_RETURN_IF_ERROR(s.Wait(added_[k]));  // its previous pieces are added
        STRATA_ASSIGN_OR_RETURN(timing, NextCopyTiming());
        if (timing != nullptr) STRATA_RETURN_IF_ERROR(timing->first.Record(s));
      }
      const size_t n = std::min(hi - lo, staging_numel_ - used);
      float* stage = static_cast<float*>(staging_[k].data()) + used;
      STRATA_RETURN_IF_ERROR(TracedGradientCopy(s, stage, src + (hi - n), n * sizeof(float)));
      copy_bytes_ += n * sizeof(float);
      pieces.push_back({flat_base + hi - n, used, n});
      used += n;
      hi -= n;
      if (used == staging_numel_) STRATA_RETURN_IF_ERROR(add_staged());
    }
  }
  if (!pieces.empty()) STRATA_RETURN_IF_ERROR(add_staged());
  return Status::Ok();
}

Status GradReducer::ReduceBucket() {
  if (queue_.empty()) return Status::Ok();
  const Stream& s = o_.overlap ? o_.comm_stream : o_.compute;
  if (o_.overlap) {  // the reduce reads what backward wrote
    STRATA_RETURN_IF_ERROR(compute_done_.Record(o_.compute));
    STRATA_RETURN_IF_ERROR(s.Wait(compute_done_));
    comm_pending_ = true;
  }
  const bool host = target_ != nullptr;
  const bool one_rank = o_.comm->world_size() == 1;  // Note [Copy first]: the slot is the shard
  for (const Queued& q : queue_) {
    const size_t param = q.param;
    float* const slot = q.slot;
    const ShardSlice& sl = o_.layout->slices()[param];
    if (!q.rows.empty() && o_.host_partition != nullptr) {
      // Note [Rows to host]: one rank, wholly in the host part, first write.
      STRATA_RETURN_IF_ERROR(CopyRowsToHost(s, slot, sl, param, q.rows, q.row_numel));
      host_written_[param] = 1;
      if (o_.slot_done) STRATA_RETURN_IF_ERROR(o_.slot_done(s, param, slot));
      if (reduced_fn_) STRATA_RETURN_IF_ERROR(reduced_fn_(s, param));
      ++reduced_;
      continue;
    }
    if (target_first_pass_) host_written_[param] = 1;  // Note [Rows to the region]: sent now
    if (!q.rows.empty()) {  // Note [Rows to the region]: one rank, the step's first pass
      STRATA_RETURN_IF_ERROR(AddRowsToTarget(s, slot, sl, q.rows, q.row_numel));
      if (o_.slot_done) STRATA_RETURN_IF_ERROR(o_.slot_done(s, param, slot));
      if (reduced_fn_) STRATA_RETURN_IF_ERROR(reduced_fn_(add_stream_, param));
      ++reduced_;
      continue;
    }
    if (!host_rows_known_.empty()) host_rows_known_[param] = 0;  // written whole below
    const float* shard = one_rank ? slot : static_cast<const float*>(recv_);
    if (!one_rank) {
      STRATA_RETURN_IF_ERROR(
          o_.comm->ReduceScatter(s, slot, recv_, sl.numel, DType::kFloat32, {}, nullptr)
              .WithContext("reduce-scatter of parameter " + std::to_string(param)));
    }
    // [0, dev_end) of the shard goes to the device partition, [dev_end, shard_numel) to the host.
    const size_t dev_end =
        !host ? sl.shard_numel
              : std::min(sl.shard_numel,
                         o_.host_begin > sl.flat_offset ? o_.host_begin - sl.flat_offset : 0);
    if (dev_end > 0) {
      float* dst = o_.partition + sl.flat_offset;
      STRATA_RETURN_IF_ERROR(
          LaunchAdd(s, dst, DType::kFloat32, dst, shard, DType::kFloat32, 1.0f, dev_end));
    }
    bool added = false;  // into the host part through the add stream
    if (dev_end < sl.shard_numel) {
      if (host_stale_ && host_written_[param] == 0) {
        STRATA_RETURN_IF_ERROR(CopyToHost(s, shard, sl, dev_end, sl.shard_numel));
        host_written_[param] = 1;
      } else {
        const std::pair<size_t, size_t> range(dev_end, sl.shard_numel);
        STRATA_RETURN_IF_ERROR(StageAndAdd(s, shard, sl.flat_offset, {&range, 1}));
        added = true;
        if (host_stale_) {  // the pass's later copies (and the listener's event) follow this add
          STRATA_RETURN_IF_ERROR(add_to_reduce_.Record(add_stream_));
          STRATA_RETURN_IF_ERROR(s.Wait(add_to_reduce_));
          added = false;
        }
      }
    }
    if (o_.slot_done) STRATA_RETURN_IF_ERROR(o_.slot_done(s, param, slot));
    if (reduced_fn_) STRATA_RETURN_IF_ERROR(reduced_fn_(added ? add_stream_ : s, param));
    ++reduced_;
  }
  ++buckets_;
  queue_.clear();
  queued_numel_ = 0;
  return Status::Ok();
}

Status GradReducer::Flush() {
  STRATA_RETURN_IF_ERROR(ReduceBucket());
  if (host_stale_) {  // nothing in flight writes the ranges no parameter of the pass reached
    ZeroUnwritten();
    host_stale_ = false;
  }
  if (comm_pending_) {  // later compute work (the next backward, the step) sees the partition
    STRATA_RETURN_IF_ERROR(comm_done_.Record(o_.comm_stream));
    STRATA_RETURN_IF_ERROR(o_.compute.Wait(comm_done_));
    comm_pending_ = false;
  }
  if (pass_open_) {  // the target's pass ends after its adds
    STRATA_RETURN_IF_ERROR(
        add_stream_.LaunchHostFunc([target = target_] { return target->EndPass(); }));
    pass_open_ = false;
    add_pending_ = true;
  }
  if (add_pending_) {  // and the host part's adds
    STRATA_RETURN_IF_ERROR(add_done_.Record(add_stream_));
    STRATA_RETURN_IF_ERROR(o_.compute.Wait(add_done_));
    add_pending_ = false;
  }
  return Status::Ok();
}

Status GradReducer::BeginPass(bool first, bool last) {
  // A flat array's passes are no-ops: nothing enqueued, so its streams run as they always did.
  if (target_ == nullptr || target_->array() != nullptr) return Status::Ok();
  target_first_pass_ = first;  // Note [Rows to the region]
  if (first) host_written_.assign(o_.layout->slices().size(), 0);
  STRATA_RETURN_IF_ERROR(add_stream_.LaunchHostFunc(
      [target = target_, first, last] { return target->BeginPass(first, last); }));
  pass_open_ = true;
  return Status::Ok();
}

void GradReducer::TakeCopyStats(StepBreakdown* b) {
  for (size_t i = 0; i < copy_events_used_; ++i) {
    const auto& [begin, end] = copy_events_[i];
    if (Result<float> ms = Event::ElapsedMs(begin, end); ms.ok()) b->d2h_ms += *ms;
  }
  b->d2h_bytes += copy_bytes_;
  copy_events_used_ = 0;
  copy_bytes_ = 0;
}

}  // namespace strata
