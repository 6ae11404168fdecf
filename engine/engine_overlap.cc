// strata.overlap_step: the engine's side of engine/overlap/step_overlap.h — which runs overlap, and
// the step arguments the boundary backward's early updates use (the expressions ApplyStep uses, so
// the same floats).
#include <algorithm>
#include <utility>

#include "engine/base/trace.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"

namespace strata {

Status Engine::PlaceStepOverlap() {
  Impl& im = *impl_;
  if (!config_.strata.overlap_step || config_.zero.stage < 2 || !im.host_opt ||
      im.reducer == nullptr) {
    return Status::Ok();
  }
  StepOverlapOptions o;
  o.device = &device_;
  o.layout = &layout_;
  o.sub_groups = im.sub_groups;
  // Null when the reducer adds the host part's gradients into host_grad itself.
  o.device_grad = im.grads_to_host ? nullptr : static_cast<const float*>(im.grad_partition);
  if (im.nvme_opt != nullptr) {
    o.nvme_opt = im.nvme_opt.get();
    o.host_grad = im.nvme_opt->grad();
  } else {
    o.cpu_opt = opt_.get();
    o.host_grad = opt_->host_grad();
    o.host_begin = opt_->device_numel();  // partial offload: only the CPU sub-groups
  }
  o.param_copy = im.param_copy;
  o.copy_dtype = compute_dtype_;
  // Stage 3, shards on NVMe (no flat array): written back per sub-group during backward (from
  // the engine thread: StepOverlap::WriteBackUpdated).
  if (im.store != nullptr && im.shards == nullptr &&
      (im.param_copy != nullptr || im.param_target != nullptr)) {
    o.param_store = im.store.get();  // param_copy null: the overlap's own copy buffers
  }
  o.budget = im.budget;
  o.tracer = im.tracer.get();
  STRATA_ASSIGN_OR_RETURN(im.overlap, StepOverlap::Create(std::move(o)));
  im.cpu_bytes += im.overlap->copy_buffer_bytes();  // charged to the budget's CPU tier
  im.reducer->set_reduced_fn([overlap = im.overlap.get()](const Stream& s, size_t param) {
    return overlap->OnReduced(s, param);
  });
  im.reducer->set_flush_hint(
      [overlap = im.overlap.get()](size_t param) { return overlap->CompletesSubGroup(param); });
  // Note [Deferred updates] (engine/overlap/step_overlap_defer.cc): stage 3 with the shards in CPU
  // memory or on NVMe, where the worker's updates reach them without the step.
  if (config_.strata.deferred_updates && config_.zero.stage == 3 && im.store != nullptr &&
      im.store->on_host() && im.overlap->CanDefer()) {
    im.defer_updates = true;
    im.store->set_fence(im.overlap.get());
    im.overlap->set_defer_leftovers(true);
    // Note [The forward's states stay] (engine/nvme/optimizer_nvme_read_ahead.cc).
    if (im.nvme_opt != nullptr) im.nvme_opt->set_keep_first(true);
  }
  return Status::Ok();
}

Status Engine::SettleDeferred() {
  Impl& im = *impl_;
  if (im.overlap == nullptr || !im.overlap->deferring()) return Status::Ok();
  TraceSpan span(im.tracer.get(), "settle deferred updates", "optimizer");
  Status s = im.overlap->Settle(&im.breakdown);
  Status z = ZeroHostGradients();  // the updates have read them
  return s.ok() ? z : s;
}

Status Engine::BeginOverlappedBackward() {
  Impl& im = *impl_;
  if (im.overlap == nullptr) return Status::Ok();
  const int64_t gas = std::max<int64_t>(1, config_.batch.gradient_accumulation_steps);
  if ((stats_.micro_steps + 1) % gas != 0) return Status::Ok();  // not the boundary
  // As ApplyStep: the step number once this step counts, its schedule, and the scale with
  // combined = loss scale (no clipping).
  OverlapStepArgs a;
  a.step = stats_.global_steps + 1 - stats_.skipped_steps;
  a.hp = im.hyperparams;
  a.hp.lr = static_cast<float>(schedule_->LrForStep(a.step - 1));
  a.hp.beta1 = static_cast<float>(schedule_->Beta1ForStep(a.step - 1));
  const double world = comm_.world_size();
  const double combined = scaler_.scale();
  a.grad_scale = static_cast<float>(1.0 / (world * combined));
  a.speculative = config_.training.gradient_clipping > 0 || config_.fp16.enabled ||
                  config_.bf16.check_grad_overflow;
  return im.overlap->Begin(a);
}

Status Engine::BeginStepReadAhead() {
  Impl& im = *impl_;
  if (im.overlap == nullptr || im.nvme_opt == nullptr) return Status::Ok();
  const int64_t gas = std::max<int64_t>(1, config_.batch.gradient_accumulation_steps);
  if ((stats_.micro_steps + 1) % gas != 0) return Status::Ok();  // not the boundary
  return im.overlap->StartReadAhead();
}

int64_t Engine::overlapped_sub_groups() const {
  return impl_->overlap != nullptr ? impl_->overlap->overlapped_sub_groups() : 0;
}

int64_t Engine::early_param_write_backs() const {
  return impl_->overlap != nullptr ? impl_->overlap->early_param_write_backs() : 0;
}

int64_t Engine::deferred_sub_groups() const {
  return impl_->overlap != nullptr ? impl_->overlap->deferred_sub_groups() : 0;
}

int64_t Engine::early_sub_groups() const {
  return impl_->overlap != nullptr ? impl_->overlap->early_sub_groups() : 0;
}

}  // namespace strata
