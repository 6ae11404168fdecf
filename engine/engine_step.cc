// The engine's gradient reduction and the optimizer step at the accumulation boundary.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/zero/store/zero3_shards.h"
#include "offload/device/api/kernels.h"

namespace strata {

// Stages 2-3: what the module hooks did not hand to the reducer yet, then the flush.
Status Engine::ReduceMicroBatchGradients() { return impl_->hooks->FinishBackward(); }

Status Engine::ReduceBoundaryGradients() {
  Impl& im = *impl_;
  if (comm_.world_size() > 1) {
    STRATA_RETURN_IF_ERROR(comm_
                               .AllReduce(im.compute, im.grads_flat, im.grads_flat, im.full_numel,
                                          DType::kFloat32, ReduceOp::kSum, nullptr)
                               .WithContext("all-reduce of the gradients"));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const ShardSlice& s = layout_.slices()[i];
    if (s.valid_numel == 0) continue;
    const float* src =
        static_cast<const float*>(im.grads_flat) + im.full_offset[i] + s.param_offset;
    float* dst = static_cast<float*>(im.grad_partition) + s.flat_offset;
    STRATA_RETURN_IF_ERROR(
        im.compute.CopyAsync(dst, src, s.valid_numel * sizeof(float), CopyKind::kDeviceToDevice));
  }
  return LaunchFill(im.compute, im.grads_flat, DType::kFloat32, 0.0f, im.full_numel);
}

namespace {

// Adds the milliseconds since `t0` to *ms and returns now.
double Lap(double t0, double* ms) {
  const double t = SteadyNowMs();
  *ms += t - t0;
  return t;
}

// One float summed (or maxed) over the ranks of `comm`, through device memory.
Result<float> AllReduceScalar(Communicator& comm, Device& device, const Stream& stream,
                              float* device_scalar, float value, ReduceOp op) {
  STRATA_RETURN_IF_ERROR(
      stream.CopyAsync(device_scalar, &value, sizeof(float), CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(stream, device_scalar, device_scalar, 1, DType::kFloat32, op, nullptr));
  float out = 0;
  STRATA_RETURN_IF_ERROR(
      stream.CopyAsync(&out, device_scalar, sizeof(float), CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  (void)device;
  return out;
}

}  // namespace

Status Engine::Step() {
  if (!IsGradientAccumulationBoundary()) return Status::Ok();
  Impl& im = *impl_;
  const double t0 = SteadyNowMs();
  Status s;
  {
    TraceSpan span(im.tracer.get(), "step", "engine");
    if (config_.zero.stage <= 1) {
      TraceSpan c(im.tracer.get(), im.compute_track, "all-reduce grads", "comm");
      s = ReduceBoundaryGradients();
      if (s.ok()) s = im.compute.Synchronize();
      if (s.ok() && comm_.world_size() > 1) {
        im.breakdown.collectives_ms += SteadyNowMs() - t0;
        im.breakdown.collective_bytes += im.full_numel * sizeof(float);
      }
    }
    if (s.ok()) s = ApplyStep();
  }
  const double t1 = SteadyNowMs();
  im.breakdown.step_ms += t1 - t0;
  // The step synchronised the compute stream: every forward/backward event has completed.
  if (im.compute.Synchronize().ok()) {
    for (const auto& [b, e] : im.forward_events) {
      if (Result<float> ms = Event::ElapsedMs(b, e); ms.ok()) im.breakdown.forward_ms += *ms;
    }
    for (const auto& [b, e] : im.backward_events) {
      if (Result<float> ms = Event::ElapsedMs(b, e); ms.ok()) im.breakdown.backward_ms += *ms;
    }
  }
  im.forward_events.clear();
  im.backward_events.clear();
  if (im.step_begin_ms >= 0) im.breakdown.total_ms = t1 - im.step_begin_ms;
  // Stage 3's parameter traffic: the store's NVMe I/O and the gathers' H2D shard copies.
  if (im.hooks != nullptr) im.hooks->AddTo(&im.breakdown);
  im.last_breakdown = im.breakdown;
  im.breakdown = StepBreakdown{};
  im.step_begin_ms = -1;
  im.FillMemoryStats(opt_.get(), &stats_);
  if (s.ok() && config_.training.steps_per_print > 0 &&
      stats_.global_steps % config_.training.steps_per_print == 0) {
    s = im.tracer->Flush();
  }
  return s;
}

Status Engine::ApplyStep() {
  Impl& im = *impl_;
  STRATA_RETURN_IF_ERROR(SettleDeferred());  // a second Step without a backward between
  const size_t n = layout_.partition_numel();
  if (im.scalar == nullptr) {
    STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, sizeof(float), "step scalars", &im.scalar));
  }
  StepBreakdown& b = im.breakdown;
  double t = SteadyNowMs();
  if (im.overlap != nullptr && im.overlap->active()) {
    // strata.overlap_step: the ready sub-groups crossed (and stepped) during backward; waits for
    // them and copies the rest (engine/overlap/step_overlap.h).
    TraceSpan span(im.tracer.get(), im.compute_track, "d2h grads", "copy");
    STRATA_RETURN_IF_ERROR(im.overlap->Finish(im.compute, &b));
  } else if (im.host_opt && !im.grads_to_host) {  // the gradient partition crosses the link once
    TraceSpan span(im.tracer.get(), im.compute_track, "d2h grads", "copy");
    // Partial offload: only the CPU sub-groups' [split, n); the device ones step in place.
    const size_t split = opt_ != nullptr ? opt_->device_numel() : 0;
    float* host_grad = im.nvme_opt != nullptr ? im.nvme_opt->grad() : opt_->host_grad();
    STRATA_RETURN_IF_ERROR(
        im.compute.CopyAsync(host_grad, static_cast<const float*>(im.grad_partition) + split,
                             (n - split) * sizeof(float), CopyKind::kDeviceToHost));
    STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
    t = Lap(t, &b.d2h_ms);
    b.d2h_bytes += (n - split) * sizeof(float);
  }
  STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
  // Stages 2-3 with the optimizer offloaded: the reducer's D2H copies of this step's micro-batches
  // (the gradients went to host memory during backward; the compute stream waited for them).
  if (im.grads_to_host && im.reducer != nullptr) im.reducer->TakeCopyStats(&b);
  // strata.overlap_step with NVMe: the read-ahead stops; its states serve the step below.
  if (im.overlap != nullptr) STRATA_RETURN_IF_ERROR(im.overlap->StopReadAhead(&b));
  NvmeOptimizerState* nvme = im.nvme_opt.get();
  ++stats_.global_steps;

  // fp16: any Inf/NaN on any rank skips the step for everyone.
  if (config_.fp16.enabled || config_.bf16.check_grad_overflow) {
    float bad = (nvme != nullptr ? nvme->GradHasNonFinite(0, n) : opt_->GradHasNonFinite(0, n))
                    ? 1.0f
                    : 0.0f;
    if (im.part_world > 1) {
      STRATA_ASSIGN_OR_RETURN(
          bad, AllReduceScalar(comm_, device_, im.compute, static_cast<float*>(im.scalar), bad,
                               ReduceOp::kMax));
    }
    if (bad != 0.0f) {
      if (im.overlap != nullptr) STRATA_RETURN_IF_ERROR(im.overlap->Rollback());
      ++stats_.skipped_steps;
      STRATA_RETURN_IF_ERROR(ZeroGradients());
      Status s = scaler_.Update(true);
      stats_.loss_scale = scaler_.scale();
      return s;
    }
  }

  // DeepSpeed's unscale_and_clip_grads on the averaged gradients: the norm of the averaged,
  // still loss-scaled gradients; one combined divisor.
  TraceSpan norm_span(im.tracer.get(), "grad norm", "optimizer");
  double sq = nvme != nullptr ? nvme->GradSquaredNorm(0, n) : opt_->GradSquaredNorm(0, n);
  if (im.part_world > 1) {
    STRATA_ASSIGN_OR_RETURN(
        float total, AllReduceScalar(comm_, device_, im.compute, static_cast<float*>(im.scalar),
                                     static_cast<float>(sq), ReduceOp::kSum));
    sq = total;
  }
  const double world = comm_.world_size();
  const double loss_scale = scaler_.scale();
  const double total_norm = std::sqrt(sq) / world;
  double combined = loss_scale;
  const double clip = config_.training.gradient_clipping;
  if (clip > 0) {
    const double c = (total_norm / loss_scale + 1e-6) / clip;
    if (c > 1) combined = c * loss_scale;
  }
  stats_.last_grad_norm = total_norm / loss_scale;
  norm_span.End();
  const float grad_scale = static_cast<float>(1.0 / (world * combined));

  Hyperparams hp = im.hyperparams;
  // global_steps already counts this step, so applied_steps() is its 1-based number.
  const int64_t step_number = applied_steps();
  hp.lr = static_cast<float>(schedule_->LrForStep(step_number - 1));
  hp.beta1 = static_cast<float>(schedule_->Beta1ForStep(step_number - 1));
  stats_.last_lr = hp.lr;
  // strata.overlap_step: the sub-groups updated during backward with these very arguments stand
  // (done[i]); with others (clipping triggered) they were restored and step here.
  std::vector<char> done(im.sub_groups.size(), 0);
  if (im.overlap != nullptr) {
    STRATA_RETURN_IF_ERROR(im.overlap->Resolve({step_number, hp, grad_scale, true}, &done));
  }
  if (im.defer_updates) {
    // Note [Deferred updates] (engine/overlap/step_overlap_defer.cc): the sub-groups left are
    // updated during the next forward; the early ones are in the shards already.
    TraceSpan span(im.tracer.get(), "defer updates", "optimizer");
    im.overlap->TakeParamsWritten();
    STRATA_RETURN_IF_ERROR(im.overlap->Defer({step_number, hp, grad_scale, false}, done));
    STRATA_RETURN_IF_ERROR(im.hooks->RegatherPersistent(/*at_next_use=*/true));
    STRATA_RETURN_IF_ERROR(ZeroDeviceGradients());  // the host part once the updates have run
    STRATA_RETURN_IF_ERROR(scaler_.Update(false));
    stats_.loss_scale = scaler_.scale();
    return Status::Ok();
  }
  {
    TraceSpan span(im.tracer.get(), "optimizer", "optimizer");
    t = SteadyNowMs();
    if (nvme != nullptr) {
      if (im.param_target != nullptr) {  // each sub-group's update goes to the store at once
        STRATA_RETURN_IF_ERROR(
            nvme->StepExcept(step_number, hp, grad_scale, im.param_target.get(), done));
      } else {
        STRATA_RETURN_IF_ERROR(
            nvme->StepExcept(step_number, hp, grad_scale, im.param_copy, compute_dtype_, done));
      }
      nvme->AddTo(&b);
    } else {
      // Partial offload: the device sub-groups write their shards in device memory.
      void* device_copy =
          im.shard_flat != nullptr && !im.shards_on_host ? im.shard_flat : im.param_copy;
      for (size_t k = 0; k < im.sub_groups.size(); ++k) {
        const SubGroup& g = im.sub_groups[k];
        if (done[k] != 0) continue;
        void* copy = g.flat_end <= opt_->device_numel() ? device_copy : im.param_copy;
        STRATA_RETURN_IF_ERROR(
            opt_->StepSubGroup(g, step_number, hp, grad_scale, copy, compute_dtype_));
      }
      if (im.host_opt) Lap(t, &b.cpu_adam_ms);
    }
  }
  STRATA_RETURN_IF_ERROR(WriteBackParameters(im.overlap != nullptr ? im.overlap->TakeParamsWritten()
                                                                   : std::vector<char>()));
  STRATA_RETURN_IF_ERROR(ZeroGradients());
  STRATA_RETURN_IF_ERROR(scaler_.Update(false));
  stats_.loss_scale = scaler_.scale();
  return Status::Ok();
}

Status Engine::ZeroGradients() {
  STRATA_RETURN_IF_ERROR(ZeroHostGradients());
  return ZeroDeviceGradients();
}

Status Engine::ZeroHostGradients() {
  Impl& im = *impl_;
  // Note [Copy first] (engine/zero/grad/grad_reducer.cc): the next backward overwrites the host
  // part.
  const bool stale = im.host_grad_copy_first && im.reducer != nullptr;
  if (im.nvme_opt != nullptr) {
    im.nvme_opt->ZeroGrad(!stale);
  } else if (opt_->tier() == Tier::kCpu) {
    opt_->ZeroGrad(!stale);
  }
  if (stale) im.reducer->MarkHostStale();
  return Status::Ok();
}

Status Engine::ZeroDeviceGradients() {
  Impl& im = *impl_;
  if (im.grad_partition != nullptr) {  // the host part (grads_to_host) was zeroed above
    STRATA_RETURN_IF_ERROR(LaunchFill(im.compute, im.grad_partition, DType::kFloat32, 0.0f,
                                      im.DeviceGradNumel(layout_.partition_numel())));
  }
  if (im.grads_flat != nullptr) {  // stage 3 has no full slots between backward passes
    STRATA_RETURN_IF_ERROR(
        LaunchFill(im.compute, im.grads_flat, DType::kFloat32, 0.0f, im.full_numel));
  }
  return im.compute.Synchronize();
}

Status Engine::WriteBackParameters(const std::vector<char>& written) {
  Impl& im = *impl_;
  const size_t cbytes = DTypeBytes(compute_dtype_);
  if (im.param_target != nullptr) {
    // offload_param nvme with the NVMe optimizer: the step handed each sub-group to the store.
  } else if (im.store != nullptr && im.shards == nullptr) {  // shards on NVMe, staged
    TraceSpan span(im.tracer.get(), im.compute_track, "write param shards", "copy");
    // The sub-groups whose parameters the overlapped step wrote back during backward
    // (StepOverlapOptions::param_store) are skipped; the rest go in runs of consecutive ones.
    const bool early = written.size() == im.sub_groups.size();
    const auto* src = static_cast<const uint8_t*>(im.param_copy);
    size_t run_begin = 0, run_end = 0;  // flat range not written yet
    for (size_t k = 0; k <= im.sub_groups.size(); ++k) {
      const bool skip = k == im.sub_groups.size() || (early && written[k] != 0);
      if (!skip) {
        const SubGroup& g = im.sub_groups[k];
        if (run_end != g.flat_begin) run_begin = g.flat_begin;
        run_end = g.flat_end;
        continue;
      }
      if (run_end > run_begin) {
        STRATA_RETURN_IF_ERROR(
            im.store->Write(run_begin, src + run_begin * cbytes, run_end - run_begin, im.compute));
      }
      run_begin = run_end = 0;
    }
  } else if (im.host_opt && !im.shards_on_host) {
    TraceSpan span(im.tracer.get(), im.compute_track, "h2d params", "copy");
    const double t = SteadyNowMs();
    // Partial offload: the device sub-groups [0, split) already wrote shard_flat.
    const size_t split = opt_ != nullptr ? opt_->device_numel() : 0;
    const size_t bytes = (layout_.partition_numel() - split) * cbytes;
    STRATA_RETURN_IF_ERROR(
        im.compute.CopyAsync(static_cast<uint8_t*>(im.shard_flat) + split * cbytes,
                             static_cast<const uint8_t*>(im.param_copy) + split * cbytes, bytes,
                             CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
    Lap(t, &im.breakdown.h2d_ms);
    im.breakdown.h2d_bytes += bytes;
  }
  if (im.store != nullptr) {  // stage 3: the shards are the parameters; the next use gathers
    STRATA_RETURN_IF_ERROR(im.hooks->RegatherPersistent());
    return im.compute.Synchronize();
  }
  TraceSpan span(im.tracer.get(), im.compute_track,
                 im.part_world == 1 ? "copy params" : "all-gather params", "comm");
  const double t = SteadyNowMs();
  for (size_t i = 0; i < params_.size(); ++i) {
    const ShardSlice& s = layout_.slices()[i];
    const uint8_t* shard = static_cast<const uint8_t*>(im.shard_flat) + s.flat_offset * cbytes;
    if (im.part_world == 1) {
      STRATA_RETURN_IF_ERROR(im.compute.CopyAsync(params_[i]->data(), shard, s.numel * cbytes,
                                                  CopyKind::kDeviceToDevice));
    } else {
      STRATA_RETURN_IF_ERROR(
          comm_.AllGather(im.compute, shard, params_[i]->data(), s.numel, compute_dtype_, nullptr)
              .WithContext("all-gather of " + params_[i]->name()));
    }
  }
  STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
  if (im.part_world > 1) {
    Lap(t, &im.breakdown.collectives_ms);
    im.breakdown.collective_bytes += layout_.partition_numel() * cbytes * (im.part_world - 1);
  }
  return Status::Ok();
}

Status Engine::GatherMasterParameter(size_t index, std::span<float> out) {
  Impl& im = *impl_;
  STRATA_RETURN_IF_ERROR(SettleDeferred());
  if (index >= params_.size())
    return InvalidArgumentError("engine: no parameter " + std::to_string(index));
  const ShardSlice& s = layout_.slices()[index];
  if (out.size() != s.numel) {
    return InvalidArgumentError("engine: " + params_[index]->name() + " has " +
                                std::to_string(s.numel) + " elements, not " +
                                std::to_string(out.size()));
  }
  if (im.part_world == 1) return ReadMaster(s.flat_offset, out);
  // This rank's slot through host memory (the master may be on NVMe or device memory the host
  // cannot address).
  std::vector<float> slot(s.shard_numel);
  STRATA_RETURN_IF_ERROR(ReadMaster(s.flat_offset, slot));
  void* shard = nullptr;
  void* full = nullptr;
  STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, s.shard_numel * sizeof(float), "gather", &shard));
  STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, s.numel * sizeof(float), "gather", &full));
  STRATA_RETURN_IF_ERROR(im.compute.CopyAsync(shard, slot.data(), s.shard_numel * sizeof(float),
                                              CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      comm_.AllGather(im.compute, shard, full, s.numel, DType::kFloat32, nullptr));
  STRATA_RETURN_IF_ERROR(
      im.compute.CopyAsync(out.data(), full, s.numel * sizeof(float), CopyKind::kDeviceToHost));
  Status st = im.compute.Synchronize();
  im.FreeDevice(device_, shard);
  im.FreeDevice(device_, full);
  return st;
}

Status Engine::SyncParametersFromMaster() {
  Impl& im = *impl_;
  STRATA_RETURN_IF_ERROR(SettleDeferred());
  if (im.store != nullptr) {  // stage 3: rewrite this rank's shards; no gather needed
    STRATA_RETURN_IF_ERROR(WriteShardsFromMasterState());
    STRATA_RETURN_IF_ERROR(im.hooks->RegatherPersistent());
    return im.compute.Synchronize();
  }
  std::vector<float> full;
  for (size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter& p = *params_[i];
    full.assign(static_cast<size_t>(p.numel()), 0.0f);
    STRATA_RETURN_IF_ERROR(GatherMasterParameter(i, full));
    STRATA_RETURN_IF_ERROR(
        nn::UploadParameter(impl_->compute, p, full.data(), DType::kFloat32, full.size()));
  }
  return impl_->compute.Synchronize();
}

}  // namespace strata
