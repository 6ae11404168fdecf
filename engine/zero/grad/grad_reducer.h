// GradReducer: ZeRO-2/3's gradient reduction — each parameter's full fp32 gradient slot, once
// backward has finished writing it, is reduce-scattered (summed over the ranks) and added (+=)
// into this rank's fp32 gradient partition, then the slot is handed back to its owner (stage 2
// zeroes it, stage 3 frees it).
//
// Buckets (DeepSpeed's reduce_bucket_size, in elements): ready slots queue up in the order they
// become ready (backward order) and are reduced together once the queue holds at least
// `bucket_numel` elements, and at Flush (on one rank, with nothing to communicate, each slot
// is reduced as soon as it is ready). With `overlap` (overlap_comm) a bucket runs on the comm
// stream after an event recorded on the compute stream (so the reduce sees every write backward
// made), and Flush makes later compute work wait for it; without overlap everything runs on the
// compute stream in issue order. The arithmetic is the same either way (one reduce-scatter and
// one add per parameter, in the same order), so results are bitwise equal with and without
// overlap and for any bucket size.
//
// The partition may be split between the device and pinned host memory (Note [Reducing into
// host memory]): flat elements [0, host_begin) live in `partition` (device), [host_begin, n) in
// `host_partition` — with the optimizer offloaded (cpu / nvme) at stages 2-3 there is then no
// device copy of the host part at all, as DeepSpeed's stage 3 with offload keeps none.
//
// Thread safety: one thread (the engine's) drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/comm/communicator.h"
#include "engine/zero/grad/grad_target.h"
#include "offload/device/api/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier_budget.h"

namespace strata {

// Called, on the stream that ran the reduce, after parameter `param`'s slot was consumed.
using SlotDoneFn = std::function<Status(const Stream& stream, size_t param, float* slot)>;
// Called after parameter `param`'s shard was added into the partition: work enqueued on `stream`
// afterwards sees its reduced range (engine/overlap/step_overlap.h counts a sub-group's ready
// slices). For a parameter in the host part `stream` is the reducer's host-add stream.
using ReducedFn = std::function<Status(const Stream& stream, size_t param)>;

// Pinned staging buffers of the host target: how many, and the elements of each — half of one
// bucket's shard (ceil(bucket_numel / world); the largest shard if smaller or bucket_numel is 0),
// at least kGradStagingMinNumel, never more than the largest shard: two whole buffers' pinned
// bytes in four (Note [Four half buffers] in grad_reducer.cc). The memory plan uses the same
// figures.
inline constexpr size_t kGradStagingBuffers = 4;
inline constexpr size_t kGradStagingMinNumel = 4096;
size_t GradStagingNumel(size_t max_shard_numel, size_t bucket_numel, int world);

struct GradReducerOptions {
  Communicator* comm = nullptr;
  Device* device = nullptr;
  Stream compute;
  Stream comm_stream;       // used when overlap
  bool overlap = false;     // zero_optimization.overlap_comm
  size_t bucket_numel = 0;  // zero_optimization.reduce_bucket_size; 0 = every slot alone
  // On one rank each slot is reduced alone whatever bucket_numel (nothing to communicate); true
  // holds them in buckets there too (the bucket logic's own tests).
  bool bucket_one_rank = false;
  const PartitionLayout* layout = nullptr;
  // Device: flat elements [0, host_begin) of this rank's fp32 gradient partition (+= target);
  // may be null when host_begin is 0.
  float* partition = nullptr;
  // Host memory: flat element f in [host_begin, partition_numel) is host_partition[f -
  // host_begin] (+= target). Null: everything goes to `partition` (host_begin is ignored).
  float* host_partition = nullptr;
  size_t host_begin = 0;
  // Instead of host_partition: the host part goes through this target
  // (engine/zero/grad/grad_target.h: the NVMe gradient region), always staged and added (no
  // copy-first; rows in the step's first pass: Note [Rows to the region]). Not owned.
  GradTarget* host_target = nullptr;
  // The host target's staging buffers: page-locked if pin_memory, charged to `budget` if set.
  bool pin_memory = true;
  TierBudget* budget = nullptr;
  SlotDoneFn slot_done;
};

class GradReducer {
 public:
  // Allocates the shard-sized receive buffer and the events; with a host target also the pinned
  // staging buffers and the host-add stream. OutOfMemory naming the buffer.
  static Result<std::unique_ptr<GradReducer>> Create(const GradReducerOptions& options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Parameter `param`'s slot (numel fp32 elements, device memory) is complete as of the work
  // enqueued on the compute stream so far.
  Status Ready(size_t param, float* slot);
  // The same for a slot valid only in `rows` (sorted, unique; `row_numel` elements each): every
  // other row's gradient is zero and its bytes are not read (Note [Rows to host]). Only when
  // TakesRows(param) said so before this pass wrote the slot.
  Status Ready(size_t param, float* slot, std::vector<int32_t> rows, size_t row_numel);
  // Whether this pass's contribution of `param` may come as rows: one rank, the parameter wholly
  // in the host part and not yet written in this stale pass (Note [Copy first]), or, with a
  // target (the NVMe region), in the step's first pass (Note [Rows to the region]).
  bool TakesRows(size_t param) const;
  // Reduces every queued slot; work enqueued on the compute stream afterwards sees the result
  // (the host part's adds included, and the target's EndPass after a BeginPass).
  Status Flush();
  // A backward pass begins (the engine, before it): the host target's BeginPass, on the add
  // stream after the previous pass's adds (Flush then enqueues its EndPass). No-op without a
  // host target or with a flat array.
  Status BeginPass(bool first, bool last);

  // The host partition's contents are stale (its owner did not zero it): in the next backward
  // pass (up to Flush) each host element's first contribution is copied D2H straight into it
  // instead of staged and added, and at Flush the host ranges of parameters that pass did not
  // reduce are zeroed. See Note [Copy first]. Only with a host target.
  void MarkHostStale();

  // Optional listener (set between backward passes); called for each parameter in reduce order.
  void set_reduced_fn(ReducedFn fn) { reduced_fn_ = std::move(fn); }
  // Optional: asked in Ready after `param` is queued; true reduces the queue at once instead of
  // waiting for the bucket to fill (the overlapped step: a parameter that completes a sub-group,
  // so its update starts as soon as backward has produced its gradients). Only the bucket
  // boundaries move: every parameter is reduced the same way, so the same bits.
  void set_flush_hint(std::function<bool(size_t param)> fn) { flush_hint_ = std::move(fn); }

  // The D2H copies into the staging buffers since the last call: adds their bytes and device
  // time to b->d2h_bytes / d2h_ms. Call after the streams are synchronized (the step); copies
  // not complete yet are counted in bytes only.
  void TakeCopyStats(StepBreakdown* b);

  uint64_t reduced_count() const { return reduced_; }
  uint64_t bucket_count() const { return buckets_; }
  // Pinned bytes of the staging buffers (0 without a host target).
  uint64_t cpu_bytes() const;
  size_t staging_numel() const { return staging_numel_; }

 private:
  explicit GradReducer(const GradReducerOptions& o) : o_(o) {}
  Status ReduceBucket();
  Status InitHostTarget();
  // src[lo, hi) of each range (flat element flat_base + i for src[i]), the ranges given last
  // first, added into the host target through the staging ring; `s` ran the reduce.
  Status StageAndAdd(const Stream& s, const float* src, size_t flat_base,
                     std::span<const std::pair<size_t, size_t>> ranges_last_first);
  // Only `rows` of the slot copied into host_partition on `s`, the rows written last time
  // zeroed first (Note [Rows to host]).
  Status CopyRowsToHost(const Stream& s, const float* slot, const ShardSlice& sl, size_t param,
                        const std::vector<int32_t>& rows, size_t row_numel);
  // Only `rows` of the slot, staged and added into the target, the elements between them
  // counted as zeros (Note [Rows to the region]).
  Status AddRowsToTarget(const Stream& s, const float* slot, const ShardSlice& sl,
                         const std::vector<int32_t>& rows, size_t row_numel);
  // The same range copied into host_partition on `s` (Note [Copy first]).
  Status CopyToHost(const Stream& s, const float* shard, const ShardSlice& sl, size_t lo,
                    size_t hi);
  // The timing pair for the next D2H, while the cap allows (null: bytes only).
  using CopyTiming = std::pair<Event, Event>;
  Result<CopyTiming*> NextCopyTiming();
  // Zeroes the host ranges of the parameters the stale pass did not reduce.
  void ZeroUnwritten();

  GradReducerOptions o_;
  ReducedFn reduced_fn_;
  std::function<bool(size_t)> flush_hint_;
  void* recv_ = nullptr;  // one shard, fp32
  Event compute_done_, comm_done_;
  struct Queued {
    size_t param = 0;
    float* slot = nullptr;
    std::vector<int32_t> rows;  // empty: the whole slot
    size_t row_numel = 0;
  };
  std::vector<Queued> queue_;
  // Per parameter, the host rows that may be nonzero after a rows-only copy (Note [Rows to
  // host]); host_rows_known_[p] == 0: any row may be.
  std::vector<std::vector<int32_t>> host_rows_;
  std::vector<char> host_rows_known_;
  size_t queued_numel_ = 0;
  uint64_t reduced_ = 0, buckets_ = 0;
  bool comm_pending_ = false;

  // Host target (Note [Reducing into host memory] in grad_reducer.cc).
  GradTarget* target_ = nullptr;  // o_.host_target, or own_target_ over host_partition
  std::unique_ptr<HostArrayGradTarget> own_target_;
  bool pass_open_ = false;  // BeginPass enqueued, EndPass not yet
  // Note [Rows to the region]: the pass begun last is the step's first (host_written_ then says
  // which parameters it has sent to the target).
  bool target_first_pass_ = false;
  size_t staging_numel_ = 0;
  std::unique_ptr<PinnedPool> staging_pool_;
  std::vector<PinnedBuffer> staging_;
  Stream add_stream_;
  std::vector<Event> copied_, added_;  // per staging buffer: D2H done, host add done
  Event add_done_;                     // the add stream's last work (Flush)
  size_t next_staging_ = 0;
  bool add_pending_ = false;
  bool host_stale_ = false;  // MarkHostStale until Flush
  // Per parameter: written in the stale pass, or (a target) sent in the step's first pass.
  std::vector<char> host_written_;
  Event add_to_reduce_;  // a stale pass's second add, before the reduce stream goes on
  // Timing events around each D2H (reused every step), and the bytes copied since TakeCopyStats.
  std::vector<std::pair<Event, Event>> copy_events_;
  size_t copy_events_used_ = 0;
  uint64_t copy_bytes_ = 0;
};

}  // namespace strata
