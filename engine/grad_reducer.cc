#include "engine/grad_reducer.h"

#include <algorithm>
#include <string>

#include "core/units.h"
#include "offload/device/kernels.h"

namespace strata {

Result<std::unique_ptr<GradReducer>> GradReducer::Create(const GradReducerOptions& options) {
  if (options.comm == nullptr || options.device == nullptr || options.layout == nullptr ||
      options.partition == nullptr || !options.compute.valid() ||
      (options.overlap && !options.comm_stream.valid())) {
    return InvalidArgumentError(
        "gradient reducer: communicator, device, streams, layout and "
        "partition are required");
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
  return r;
}

GradReducer::~GradReducer() {
  if (o_.overlap) o_.comm_stream.Synchronize().IgnoreError();
  o_.compute.Synchronize().IgnoreError();
  if (recv_ != nullptr) o_.device->Free(recv_).IgnoreError();
}

Status GradReducer::Ready(size_t param, float* slot) {
  queue_.emplace_back(param, slot);
  queued_numel_ += o_.layout->slices()[param].numel;
  if (queued_numel_ >= o_.bucket_numel) return ReduceBucket();
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
  for (const auto& [param, slot] : queue_) {
    const ShardSlice& sl = o_.layout->slices()[param];
    float* dst = o_.partition + sl.flat_offset;
    STRATA_RETURN_IF_ERROR(
        o_.comm->ReduceScatter(s, slot, recv_, sl.numel, DType::kFloat32, {}, nullptr)
            .WithContext("reduce-scatter of parameter " + std::to_string(param)));
    STRATA_RETURN_IF_ERROR(
        LaunchAdd(s, dst, DType::kFloat32, dst, recv_, DType::kFloat32, 1.0f, sl.shard_numel));
    if (o_.slot_done) STRATA_RETURN_IF_ERROR(o_.slot_done(s, param, slot));
    if (reduced_fn_) STRATA_RETURN_IF_ERROR(reduced_fn_(s, param));
    ++reduced_;
  }
  ++buckets_;
  queue_.clear();
  queued_numel_ = 0;
  return Status::Ok();
}

Status GradReducer::Flush() {
  STRATA_RETURN_IF_ERROR(ReduceBucket());
  if (comm_pending_) {  // later compute work (the next backward, the step) sees the partition
    STRATA_RETURN_IF_ERROR(comm_done_.Record(o_.comm_stream));
    STRATA_RETURN_IF_ERROR(o_.compute.Wait(comm_done_));
    comm_pending_ = false;
  }
  return Status::Ok();
}

}  // namespace strata
