// Engine set-up (placement, initial values) and the micro-step API; the boundary step is in
// engine_step.cc.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/units.h"
#include "engine/config/auto_sizes.h"
#include "engine/engine_impl.h"
#include "engine/nvme/swap_chunks.h"
#include "engine/optim/partial_offload.h"
#include "engine/plan/cpu_budget.h"
#include "engine/plan/memory_plan.h"
#include "engine/zero/store/zero3_shards.h"
#include "offload/device/api/kernels.h"

namespace strata {

namespace {

constexpr size_t kAlignNumel = 64;

size_t AlignUp(size_t n) { return (n + kAlignNumel - 1) / kAlignNumel * kAlignNumel; }

Result<OptimizerKind> ToKernel(const OptimizerConfig& o, Hyperparams* hp) {
  hp->lr = static_cast<float>(o.lr);
  hp->beta1 = static_cast<float>(o.beta1);
  hp->beta2 = static_cast<float>(o.beta2);
  hp->eps = static_cast<float>(o.eps);
  hp->weight_decay = static_cast<float>(o.weight_decay);
  hp->adam_w_mode = o.adam_w_mode;
  hp->bias_correction = o.bias_correction;
  switch (o.type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      return OptimizerKind::kAdam;
    case OptimizerType::kAdagrad:
      return OptimizerKind::kAdagrad;
    case OptimizerType::kLion:
      return OptimizerKind::kLion;
  }
  return InvalidArgumentError("optimizer.type: unknown");
}

}  // namespace

Engine::Engine(nn::CausalLM& model, const Config& config, Communicator& comm, Device& device)
    : model_(model),
      config_(config),
      comm_(comm),
      device_(device),
      impl_(std::make_unique<Impl>()) {}

Engine::~Engine() {
  // The last step's deferred updates run to the end (its errors are the caller's to miss: a
  // checkpoint or a read of the weights settles them first and reports them).
  if (impl_ != nullptr) SettleDeferred().IgnoreError();
  if (impl_ != nullptr && impl_->store != nullptr) impl_->store->set_fence(nullptr);
  if (impl_ != nullptr && impl_->hooks != nullptr) model_.RemoveHooksRecursive(impl_->hooks.get());
  if (impl_ != nullptr) impl_->Release(device_);  // streams drained, device buffers freed
  opt_.reset();  // its pinned slab is charged to the budget impl_ may own
  impl_.reset();
}

Result<std::unique_ptr<Engine>> Engine::Initialize(nn::CausalLM& model, const Config& config,
                                                   Communicator& comm, Device& device,
                                                   const EngineInit& init) {
  const ZeroConfig& z = config.zero;
  // Before anything is allocated (the swap buffers can be large): the optimizer must write the
  // updated shards from host memory.
  if (z.stage == 3 && z.offload_param.device == OffloadDevice::kNvme &&
      z.offload_optimizer.device == OffloadDevice::kNone) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.device = nvme needs offload_optimizer.device cpu or "
        "nvme (the optimizer writes the updated shards from host memory)");
  }
  STRATA_RETURN_IF_ERROR(CheckPartialOffload(z));  // offload_optimizer.ratio
  if (!init.init_param) return InvalidArgumentError("engine: EngineInit::init_param is required");
  // "auto" sizing keys that depend on the model (offload_param.buffer_size) are settled here.
  Config resolved = config;
  {
    std::vector<size_t> numels;
    for (const nn::Parameter* p : model.NamedParameters()) {
      numels.push_back(static_cast<size_t>(p->numel()));
    }
    ResolveModelAutoSizes(&resolved, numels, z.stage >= 1 ? comm.world_size() : 1);
    // strata.cpu_memory: the "auto" sizing keys chosen within it, or OutOfMemory naming it and
    // the minimum when even the smallest pipeline does not fit (engine/plan/cpu_budget.h).
    if (resolved.strata.cpu_memory_bytes > 0 && !resolved.strata.sizes_within_budget) {
      STRATA_ASSIGN_OR_RETURN(
          BudgetPlan b,
          PlanWithinCpuBudget(
              ShapeFromNumels({numels.begin(), numels.end()}), resolved,
              {.world = comm.world_size(), .rank = comm.rank(), .include_activations = false},
              resolved.strata.cpu_memory_bytes, resolved.zero.auto_sizes));
      resolved = std::move(b.config);
      resolved.strata.sizes_within_budget = true;
    }
  }
  std::unique_ptr<Engine> e(new Engine(model, resolved, comm, device));
  STRATA_RETURN_IF_ERROR(e->Place(init));
  STRATA_RETURN_IF_ERROR(e->InitializeValues(init));
  return e;
}

Status Engine::Place(const EngineInit& init) {
  Impl& im = *impl_;
  const ZeroConfig& z = config_.zero;
  compute_dtype_ = config_.bf16.enabled   ? DType::kBFloat16
                   : config_.fp16.enabled ? DType::kFloat16
                                          : DType::kFloat32;
  params_ = model_.NamedParameters();
  if (params_.empty()) return InvalidArgumentError("engine: the model has no parameters");
  std::vector<size_t> numels;
  for (const nn::Parameter* p : params_) {
    if (p->dtype() != compute_dtype_) {
      return InvalidArgumentError(
          "engine: parameter " + p->name() + " is " + std::string(DTypeName(p->dtype())) +
          " but the config trains in " + std::string(DTypeName(compute_dtype_)) +
          " (build the model with the config's dtype: fp16/bf16.enabled)");
    }
    numels.push_back(static_cast<size_t>(p->numel()));
  }
  im.budget = init.budget != nullptr ? init.budget : &im.own_budget;
  im.tracer = std::make_unique<Tracer>(config_.strata.trace_path, comm_.rank());
  im.compute_track = im.tracer->Track("stream compute");
  // aio threads and Adam workers record into it (core/trace.h: Note [The current tracer]); it
  // uninstalls itself when destroyed. Without strata.trace_path nothing is installed (an engine
  // that does not trace leaves another engine's tracer in place: bench/overlap runs two).
  im.tracer->NameThisThread("engine");
  if (im.tracer->enabled()) SetCurrentTracer(im.tracer.get());

  // Fit check: what this placement needs per tier against the device's free memory and the
  // CPU budget, before anything is allocated (OutOfMemory with the per-tier table).
  {
    STRATA_ASSIGN_OR_RETURN(
        MemoryPlan plan,
        PlanEngineMemory(
            ShapeFromNumels({numels.begin(), numels.end()}), config_,
            {.world = comm_.world_size(), .rank = comm_.rank(), .include_activations = false}));
    // strata.cpu_memory (already planned within, Initialize): an engine that owns its budget
    // holds the pinned tier to what the plan's pageable part leaves of it.
    const uint64_t cpu_memory = config_.strata.cpu_memory_bytes;
    if (cpu_memory > 0 && im.budget == &im.own_budget) {
      const uint64_t pageable = plan.bytes(PlanTier::kPageableCpu);
      im.own_budget.SetLimit(Tier::kCpu, cpu_memory > pageable ? cpu_memory - pageable : 1);
    }
    const DeviceMemoryStats d = device_.MemoryStats();
    TierBytes caps{};
    caps[0] = d.capacity_bytes > d.in_use_bytes ? d.capacity_bytes - d.in_use_bytes : 1;
    const TierStats c = im.budget->Stats(Tier::kCpu);
    caps[1] = c.limit_bytes == TierBudget::kUnlimited ? 0
              : c.limit_bytes > c.current_bytes       ? c.limit_bytes - c.current_bytes
                                                      : 1;
    STRATA_RETURN_IF_ERROR(CheckPlanFits(plan, caps));
  }
  const bool partitioned = z.stage >= 1;
  im.part_world = partitioned ? comm_.world_size() : 1;
  STRATA_ASSIGN_OR_RETURN(
      layout_,
      PartitionLayout::Create(numels, im.part_world, partitioned ? comm_.rank() : 0, kAlignNumel));

  STRATA_ASSIGN_OR_RETURN(im.compute, device_.CreateStream());
  // The comm stream at the device's most urgent priority (CUDA clamps -2^16 to the top of its
  // range; HostDevice ignores it): its collectives free gradient buckets and gate the step.
  STRATA_ASSIGN_OR_RETURN(im.comm, device_.CreateStream(StreamOptions{.priority = -(1 << 16)}));

  // Full parameters and fp32 gradient slots, one flat device buffer each (stages 0-2; stage 3
  // gathers parameters and makes gradient slots per module, engine/zero/hooks/zero3_hooks.h).
  const bool stage3 = z.stage == 3;
  size_t total = 0;
  for (size_t n : numels) {
    im.full_offset.push_back(total);
    total += AlignUp(n);
  }
  im.full_numel = total;
  const size_t cbytes = DTypeBytes(compute_dtype_);
  const size_t part_bytes = layout_.partition_numel() * cbytes;
  if (!stage3) {
    STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, total * cbytes, "parameters", &im.params_flat));
    STRATA_RETURN_IF_ERROR(
        im.AllocDevice(device_, total * sizeof(float), "gradients (fp32)", &im.grads_flat));
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i]->set_data(static_cast<uint8_t*>(im.params_flat) + im.full_offset[i] * cbytes);
      params_[i]->set_grad(static_cast<float*>(im.grads_flat) + im.full_offset[i], DType::kFloat32);
    }
    STRATA_RETURN_IF_ERROR(
        LaunchFill(im.compute, im.grads_flat, DType::kFloat32, 0.0f, im.full_numel));
  }
  if (stage3) {
    STRATA_ASSIGN_OR_RETURN(ParamStoreOptions so,
                            ParamStoreOptionsFromConfig(config_, comm_.rank()));
    so.device = &device_;
    so.layout = &layout_;
    so.dtype = compute_dtype_;
    so.budget = im.budget;
    STRATA_ASSIGN_OR_RETURN(im.store, ParamStore::Create(so));
    im.shards = im.store->flat();
    im.shards_on_host = im.store->on_host();
    if (im.store->tier() == Tier::kDevice) im.shard_flat = im.shards;
    im.cpu_bytes += im.store->cpu_bytes();
  } else {
    STRATA_RETURN_IF_ERROR(
        im.AllocDevice(device_, part_bytes, "updated parameter shards", &im.shard_flat));
    STRATA_RETURN_IF_ERROR(
        LaunchFill(im.compute, im.shard_flat, compute_dtype_, 0.0f, layout_.partition_numel()));
  }

  // Optimizer state and the fp32 gradient partition it steps on.
  // With offload_optimizer nvme, cut into swap chunks (engine/nvme/swap_chunks.h).
  const OptimizerSwapPlan swap_plan = PlanOptimizerSwap(layout_, config_);
  im.sub_groups = swap_plan.groups;
  if (z.offload_optimizer.device == OffloadDevice::kNvme) {
    STRATA_ASSIGN_OR_RETURN(NvmeOptimizerStateOptions no,
                            NvmeOptimizerStateOptionsFromConfig(config_, comm_.rank()));
    // The chunks' buffers: buffer_count of them, or more, finer, under "auto" (swap_chunks.h).
    no.buffer_count = static_cast<size_t>(swap_plan.buffer_count);
    STRATA_ASSIGN_OR_RETURN(no.kind, ToKernel(config_.optimizer, &no.hyperparams));
    im.hyperparams = no.hyperparams;
    // Stages 2-3: the reduced gradients go to the NVMe gradient region (issue #36), unless
    // strata.nvme_grad_chunk is 0.
    if (z.stage >= 2) no.grad_chunk_numel = config_.strata.nvme_grad_chunk_bytes / sizeof(float);
    STRATA_ASSIGN_OR_RETURN(
        im.nvme_opt, NvmeOptimizerState::Create(layout_, im.sub_groups, no, &device_, im.budget));
    im.cpu_bytes += im.nvme_opt->cpu_bytes();
    im.nvme_opt->set_tracer(im.tracer.get());
    im.host_opt = true;
    im.grads_to_host = z.stage >= 2;
    // Copy-first needs a flat host array (the region is added into, chunk by chunk).
    im.host_grad_copy_first =
        im.grads_to_host && no.kind != OptimizerKind::kAdagrad && no.grad_chunk_numel == 0;
    im.grad_target = im.nvme_opt->grad_region();  // null without one
  } else {
    OptimizerStateOptions oo;
    STRATA_ASSIGN_OR_RETURN(oo.kind, ToKernel(config_.optimizer, &oo.hyperparams));
    oo.tier = z.offload_optimizer.device == OffloadDevice::kCpu ? Tier::kCpu : Tier::kDevice;
    oo.pin_memory = z.offload_optimizer.pin_memory;
    im.hyperparams = oo.hyperparams;
    // Partial offload (ratio < 1): the first sub-groups step on the device, on their gradients
    // in place in the device gradient partition (engine/optim/partial_offload.h).
    oo.device_numel = PartialOffloadSplit(z, im.sub_groups);
    // Stages 2-3 reduce the CPU sub-groups' gradients straight into host memory: the device
    // gradient partition is then only the device sub-groups' [0, split).
    im.grads_to_host = z.stage >= 2 && oo.tier == Tier::kCpu;
    im.host_grad_copy_first = im.grads_to_host && oo.kind != OptimizerKind::kAdagrad;
    if (oo.device_numel > 0) {
      const size_t dev_numel = im.grads_to_host ? oo.device_numel : layout_.partition_numel();
      STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, dev_numel * sizeof(float),
                                            "gradient partition (fp32)", &im.grad_partition_dev));
      oo.device_grad = static_cast<float*>(im.grad_partition_dev);
    }
    STRATA_ASSIGN_OR_RETURN(opt_, OptimizerState::Create(layout_, oo, &device_, im.budget));
    if (oo.tier == Tier::kCpu) {
      im.cpu_bytes += opt_->cpu_bytes();
      im.device_bytes += opt_->device_bytes();  // the device sub-groups' master and moments
    }
    im.host_opt = oo.tier == Tier::kCpu;
  }
  // With the shards in pinned CPU memory the optimizer writes them in place.
  if (!im.host_opt) {
    im.grad_partition = opt_->grad();  // the optimizer reads device memory directly
    im.param_copy = im.shards_on_host ? im.shards : im.shard_flat;  // never NVMe: refused above
  } else {
    if (im.grads_to_host) {  // engine/zero/grad/grad_reducer.h: Note [Reducing into host memory]
      im.host_grad = im.nvme_opt != nullptr ? im.nvme_opt->grad() : opt_->host_grad();
      im.host_grad_begin = opt_ != nullptr ? opt_->device_numel() : 0;
    } else if (im.grad_partition_dev == nullptr) {
      STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, layout_.partition_numel() * sizeof(float),
                                            "gradient partition (fp32)", &im.grad_partition_dev));
    }
    im.grad_partition = im.grad_partition_dev;  // null when every gradient goes to the host
    if (im.grad_partition != nullptr) {
      STRATA_RETURN_IF_ERROR(LaunchFill(im.compute, im.grad_partition, DType::kFloat32, 0.0f,
                                        im.DeviceGradNumel(layout_.partition_numel())));
    }
    if (im.shards_on_host && im.shards != nullptr) {
      im.param_copy = im.shards;
    } else if (im.store != nullptr && im.store->tier() == Tier::kNvme && im.nvme_opt != nullptr) {
      // offload_param nvme with the NVMe optimizer state: no partition-sized staging. Each swap
      // chunk's update goes to the store from one chunk-sized buffer (issue #36); the shards kept
      // in CPU (max_in_cpu) have the store's own storage.
      size_t largest = 1;
      for (const SubGroup& g : im.sub_groups)
        largest = std::max(largest, g.flat_end - g.flat_begin);
      STRATA_ASSIGN_OR_RETURN(
          im.param_target,
          StoreParamCopy::Create(im.store.get(), im.compute, largest, compute_dtype_,
                                 z.offload_optimizer.pin_memory, &device_, im.budget));
      im.cpu_bytes += im.param_target->cpu_bytes();
    } else {
      PinnedPoolOptions po;
      po.buffer_bytes = std::max<size_t>(part_bytes, 64);
      po.buffer_count = 1;
      po.lock = z.offload_optimizer.pin_memory;
      po.device = &device_;
      po.budget = im.budget;
      po.name = "updated parameter staging";
      STRATA_ASSIGN_OR_RETURN(im.staging_pool, PinnedPool::Create(po));
      im.staging = im.staging_pool->Acquire();
      im.param_copy = im.staging.data();
      im.cpu_bytes += im.staging_pool->buffer_bytes();
      // offload_param nvme (offload_optimizer cpu): the shards kept in CPU memory become ranges
      // of the staging (the store's own storage is freed).
      if (im.store != nullptr) {
        im.cpu_bytes -= std::min(im.cpu_bytes, im.store->cpu_bytes());
        STRATA_RETURN_IF_ERROR(im.store->ShareCpuFlat(im.param_copy));
        im.cpu_bytes += im.store->cpu_bytes();
      }
    }
  }
  if (z.stage >= 2) {
    STRATA_RETURN_IF_ERROR(
        im.PlaceHooks(model_, z, comm_, device_, params_, layout_, compute_dtype_));
    STRATA_RETURN_IF_ERROR(PlaceStepOverlap());
  }

  // Loss scaling and the LR schedule.
  if (config_.fp16.enabled) {
    LossScalerOptions lo;
    lo.dynamic = config_.fp16.loss_scale == 0;
    lo.initial_scale = lo.dynamic
                           ? std::ldexp(1.0, static_cast<int>(config_.fp16.initial_scale_power))
                           : config_.fp16.loss_scale;
    lo.scale_window = config_.fp16.loss_scale_window;
    lo.hysteresis = config_.fp16.hysteresis;
    lo.consecutive_hysteresis = config_.fp16.consecutive_hysteresis;
    lo.min_scale = config_.fp16.min_loss_scale;
    STRATA_ASSIGN_OR_RETURN(scaler_, LossScaler::Create(lo));
  }
  STRATA_ASSIGN_OR_RETURN(
      LrSchedule schedule,
      LrSchedule::Create(config_.scheduler, config_.optimizer.lr, config_.optimizer.beta1));
  schedule_ = std::make_unique<LrSchedule>(schedule);
  stats_.loss_scale = scaler_.scale();
  return Status::Ok();
}

Status Engine::InitializeValues(const EngineInit& ei) {
  const ParamInitFn& init = ei.init_param;
  std::vector<float> values;
  InitProgress progress;
  progress.params_total = static_cast<int64_t>(params_.size());
  for (const nn::Parameter* p : params_)
    progress.elements_total += static_cast<uint64_t>(p->numel());
  const auto start = std::chrono::steady_clock::now();
  double last_report = 0;
  bool reported = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter& p = *params_[i];
    if (ei.progress) {
      progress.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (progress.seconds - last_report >= ei.progress_interval_s) {
        ei.progress(progress);
        last_report = progress.seconds;
        reported = true;
      }
    }
    values.assign(static_cast<size_t>(p.numel()), 0.0f);
    STRATA_RETURN_IF_ERROR(init(p, values).WithContext("initialising " + p.name()));
    ++progress.params_done;
    progress.elements_done += static_cast<uint64_t>(p.numel());
    const ShardSlice& s = layout_.slices()[i];
    STRATA_RETURN_IF_ERROR(WriteMaster(
        s.flat_offset, std::span<const float>(values).subspan(s.param_offset, s.valid_numel)));
    // The compute copy starts as the master rounded once, as every later write-back is.
    if (impl_->store == nullptr) {
      STRATA_RETURN_IF_ERROR(
          nn::UploadParameter(impl_->compute, p, values.data(), DType::kFloat32, values.size()));
    }
  }
  if (impl_->nvme_opt != nullptr) STRATA_RETURN_IF_ERROR(impl_->nvme_opt->Flush());
  if (impl_->store != nullptr) {  // stage 3: the shards, then the persistent parameters
    STRATA_RETURN_IF_ERROR(WriteShardsFromMasterState());
    STRATA_RETURN_IF_ERROR(impl_->hooks->RegatherPersistent());
    STRATA_RETURN_IF_ERROR(impl_->compute.Synchronize());
  }
  if (reported) {
    progress.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ei.progress(progress);
  }
  impl_->FillMemoryStats(opt_.get(), &stats_);
  return Status::Ok();
}

Status Engine::Forward(const nn::TokenBatch& micro_batch) {
  Impl& im = *impl_;
  nn::RunContext ctx{&device_, im.compute, true};
  const double t0 = SteadyNowMs();
  if (im.step_begin_ms < 0) {
    im.step_begin_ms = t0;
    im.breakdown = StepBreakdown{};
  }
  {
    TraceSpan span(im.tracer.get(), "forward", "engine");
    STRATA_ASSIGN_OR_RETURN(Event begin, device_.CreateEvent());
    STRATA_ASSIGN_OR_RETURN(Event end, device_.CreateEvent());
    STRATA_RETURN_IF_ERROR(begin.Record(im.compute));
    STRATA_RETURN_IF_ERROR(BeginStepReadAhead());  // strata.overlap_step, NVMe state
    const uint64_t h2d0 = im.hooks != nullptr ? im.hooks->h2d_bytes_pending() : 0;
    STRATA_RETURN_IF_ERROR(model_.Forward(ctx, micro_batch));
    if (im.hooks != nullptr) im.breakdown.forward_h2d_bytes += im.hooks->h2d_bytes_pending() - h2d0;
    STRATA_RETURN_IF_ERROR(end.Record(im.compute));
    im.forward_events.emplace_back(std::move(begin), std::move(end));
  }
  impl_->FillMemoryStats(opt_.get(), &stats_);
  return Status::Ok();
}

Status Engine::Backward() {
  nn::RunContext ctx{&device_, impl_->compute, true};
  const double gas =
      static_cast<double>(std::max<int64_t>(1, config_.batch.gradient_accumulation_steps));
  {
    TraceSpan span(impl_->tracer.get(), "backward", "engine");
    STRATA_ASSIGN_OR_RETURN(Event begin, device_.CreateEvent());
    STRATA_ASSIGN_OR_RETURN(Event end, device_.CreateEvent());
    STRATA_RETURN_IF_ERROR(begin.Record(impl_->compute));
    // The last step's deferred updates have run during the forward; the backward's gradients go
    // where they read theirs.
    STRATA_RETURN_IF_ERROR(SettleDeferred());
    if (impl_->reducer != nullptr) {  // the gradient target's pass (the NVMe region accumulates)
      const int64_t g = static_cast<int64_t>(gas);
      STRATA_RETURN_IF_ERROR(impl_->reducer->BeginPass(stats_.micro_steps % g == 0,
                                                       (stats_.micro_steps + 1) % g == 0));
    }
    STRATA_RETURN_IF_ERROR(BeginOverlappedBackward());  // strata.overlap_step, at the boundary
    STRATA_RETURN_IF_ERROR(model_.Backward(ctx, static_cast<float>(scaler_.scale() / gas)));
    ++stats_.micro_steps;
    if (config_.zero.stage >= 2) STRATA_RETURN_IF_ERROR(ReduceMicroBatchGradients());
    if (impl_->overlap != nullptr) impl_->overlap->EndBackward();
    STRATA_RETURN_IF_ERROR(end.Record(impl_->compute));
    impl_->backward_events.emplace_back(std::move(begin), std::move(end));
  }
  impl_->FillMemoryStats(opt_.get(), &stats_);
  return Status::Ok();
}

bool Engine::IsGradientAccumulationBoundary() const {
  const int64_t gas = std::max<int64_t>(1, config_.batch.gradient_accumulation_steps);
  return stats_.micro_steps > 0 && stats_.micro_steps % gas == 0;
}

const StepBreakdown& Engine::last_breakdown() const { return impl_->last_breakdown; }

Status Engine::FlushTrace() { return impl_->tracer->Flush(); }

Status Engine::Synchronize() {
  STRATA_RETURN_IF_ERROR(SettleDeferred());
  STRATA_RETURN_IF_ERROR(impl_->compute.Synchronize());
  if (impl_->nvme_opt != nullptr) STRATA_RETURN_IF_ERROR(impl_->nvme_opt->SettleWrites());
  if (impl_->store != nullptr) STRATA_RETURN_IF_ERROR(impl_->store->Drain());
  return Status::Ok();
}

Status Engine::ReadMaster(size_t flat_begin, std::span<float> out) {
  STRATA_RETURN_IF_ERROR(SettleDeferred());
  if (impl_->nvme_opt != nullptr) {
    return impl_->nvme_opt->ReadState(flat_begin, out.size(), out.data(), nullptr, nullptr);
  }
  return opt_->Read(OptimizerState::Array::kMaster, flat_begin, out);
}

Status Engine::WriteMaster(size_t flat_begin, std::span<const float> in) {
  STRATA_RETURN_IF_ERROR(SettleDeferred());
  if (impl_->nvme_opt != nullptr) return impl_->nvme_opt->WriteMaster(flat_begin, in);
  return opt_->Write(OptimizerState::Array::kMaster, flat_begin, in);
}

Status Engine::WriteShardsFromMasterState() {
  Impl& im = *impl_;
  STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
  std::vector<float> master;
  for (const SubGroup& g : im.sub_groups) {
    const size_t n = g.flat_end - g.flat_begin;
    master.resize(n);
    STRATA_RETURN_IF_ERROR(ReadMaster(g.flat_begin, master));
    STRATA_RETURN_IF_ERROR(WriteShardsFromMaster(master.data(), g.flat_begin, n, compute_dtype_,
                                                 *im.store, im.compute));
  }
  return Status::Ok();
}

Result<float> Engine::Loss() {
  nn::RunContext ctx{&device_, impl_->compute, true};
  return model_.ReadLoss(ctx);
}

}  // namespace strata
