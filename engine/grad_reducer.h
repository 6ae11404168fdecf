// GradReducer: ZeRO-2/3's gradient reduction — each parameter's full fp32 gradient slot, once
// backward has finished writing it, is reduce-scattered (summed over the ranks) and added (+=)
// into this rank's fp32 gradient partition, then the slot is handed back to its owner (stage 2
// zeroes it, stage 3 frees it).
//
// Buckets (DeepSpeed's reduce_bucket_size, in elements): ready slots queue up in the order they
// become ready (backward order) and are reduced together once the queue holds at least
// `bucket_numel` elements, and at Flush. With `overlap` (overlap_comm) a bucket runs on the comm
// stream after an event recorded on the compute stream (so the reduce sees every write backward
// made), and Flush makes later compute work wait for it; without overlap everything runs on the
// compute stream in issue order. The arithmetic is the same either way (one reduce-scatter and
// one add per parameter, in the same order), so results are bitwise equal with and without
// overlap and for any bucket size.
//
// Thread safety: one thread (the engine's) drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/comm/communicator.h"
#include "engine/partition.h"
#include "offload/device/device.h"

namespace strata {

// Called, on the stream that ran the reduce, after parameter `param`'s slot was consumed.
using SlotDoneFn = std::function<Status(const Stream& stream, size_t param, float* slot)>;
// Called after parameter `param`'s shard was added into the partition: work enqueued on `stream`
// afterwards sees its reduced range (engine/step_overlap.h counts a sub-group's ready slices).
using ReducedFn = std::function<Status(const Stream& stream, size_t param)>;

struct GradReducerOptions {
  Communicator* comm = nullptr;
  Device* device = nullptr;
  Stream compute;
  Stream comm_stream;       // used when overlap
  bool overlap = false;     // zero_optimization.overlap_comm
  size_t bucket_numel = 0;  // zero_optimization.reduce_bucket_size; 0 = every slot alone
  const PartitionLayout* layout = nullptr;
  float* partition = nullptr;  // device: this rank's fp32 gradient partition (+= target)
  SlotDoneFn slot_done;
};

class GradReducer {
 public:
  // Allocates the shard-sized receive buffer and the events. OutOfMemory naming the buffer.
  static Result<std::unique_ptr<GradReducer>> Create(const GradReducerOptions& options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Parameter `param`'s slot (numel fp32 elements, device memory) is complete as of the work
  // enqueued on the compute stream so far.
  Status Ready(size_t param, float* slot);
  // Reduces every queued slot; work enqueued on the compute stream afterwards sees the result.
  Status Flush();

  // Optional listener (set between backward passes); called for each parameter in reduce order.
  void set_reduced_fn(ReducedFn fn) { reduced_fn_ = std::move(fn); }

  uint64_t reduced_count() const { return reduced_; }
  uint64_t bucket_count() const { return buckets_; }

 private:
  explicit GradReducer(const GradReducerOptions& o) : o_(o) {}
  Status ReduceBucket();

  GradReducerOptions o_;
  ReducedFn reduced_fn_;
  void* recv_ = nullptr;  // one shard, fp32
  Event compute_done_, comm_done_;
  std::vector<std::pair<size_t, float*>> queue_;
  size_t queued_numel_ = 0;
  uint64_t reduced_ = 0, buckets_ = 0;
  bool comm_pending_ = false;
};

}  // namespace strata
