#include "engine/nvme/optimizer_nvme.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/units.h"
#include "engine/base/trace.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata {
namespace {

constexpr char kPathKey[] = "zero_optimization.offload_optimizer.nvme_path";

}  // namespace

Result<NvmeOptimizerStateOptions> NvmeOptimizerStateOptionsFromConfig(const Config& config,
                                                                      int rank) {
  const OffloadOptimizerConfig& oc = config.zero.offload_optimizer;
  if (oc.nvme_paths.empty()) {
    return InvalidArgumentError(std::string(kPathKey) +
                                " is required with offload_optimizer.device = \"nvme\" (a "
                                "directory, or a list of directories to stripe over)");
  }
  NvmeOptimizerStateOptions o;
  namespace fs = std::filesystem;
  for (const std::string& p : oc.nvme_paths) {
    std::error_code ec;
    const fs::path abs = fs::absolute(fs::path(p), ec);
    if (ec) {
      return InvalidArgumentError(std::string(kPathKey) + " '" + p + "': " + ec.message());
    }
    if (!fs::exists(abs, ec)) {
      fs::create_directories(abs, ec);
      if (ec) {
        return InvalidArgumentError(std::string(kPathKey) + " '" + p + "' (" + abs.string() +
                                    ") does not exist and cannot be made: " + ec.message());
      }
    }
    o.nvme_paths.push_back(abs.lexically_normal().string());
  }
  if (oc.buffer_count < 1) {
    return InvalidArgumentError("zero_optimization.offload_optimizer.buffer_count " +
                                std::to_string(oc.buffer_count) + " must be at least 1");
  }
  o.pin_memory = oc.pin_memory;
  o.buffer_count = static_cast<size_t>(oc.buffer_count);
  o.pipeline_read = oc.pipeline_read;
  o.pipeline_write = oc.pipeline_write;
  o.checksums = config.strata.swap_checksums;
  o.rank = rank;
  o.aio = config.aio;
  return o;
}

Result<std::unique_ptr<NvmeOptimizerState>> NvmeOptimizerState::Create(
    const PartitionLayout& layout, const std::vector<SubGroup>& sub_groups,
    const NvmeOptimizerStateOptions& options, Device* device, TierBudget* budget, AioHandle* aio) {
  const size_t numel = layout.partition_numel();
  size_t expect = 0;
  for (size_t i = 0; i < sub_groups.size(); ++i) {
    const SubGroup& g = sub_groups[i];
    if (g.flat_begin != expect || g.flat_end < g.flat_begin) {
      return InvalidArgumentError("nvme optimizer state: sub-group " + std::to_string(i) + " is [" +
                                  std::to_string(g.flat_begin) + ", " + std::to_string(g.flat_end) +
                                  "); sub-groups must be in order " +
                                  "and cover the partition (next expected at " +
                                  std::to_string(expect) + ")");
    }
    expect = g.flat_end;
  }
  if (expect != numel) {
    return InvalidArgumentError("nvme optimizer state: sub-groups cover " + std::to_string(expect) +
                                " elements of a partition of " + std::to_string(numel));
  }
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(options.kind, options.hyperparams));
  CpuOptimizerOptions co;
  co.num_threads = options.num_threads;
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer optimizer, CpuOptimizer::Create(options.kind, co));
  STRATA_RETURN_IF_ERROR(optimizer.AddGroup(options.hyperparams).status());
  std::unique_ptr<NvmeOptimizerState> s(new NvmeOptimizerState(options, std::move(optimizer)));
  s->numel_ = numel;
  s->norm_sums_.assign(SquaredNormChunks(numel), 0.0);
  s->norm_ready_.assign(s->norm_sums_.size(), 0);
  s->budget_ = budget;
  s->groups_ = sub_groups;
  if (aio == nullptr) {
    STRATA_ASSIGN_OR_RETURN(s->own_aio_, AioHandle::Create(options.aio));
    aio = s->own_aio_.get();
  }
  OptimizerSwapperOptions so;
  so.nvme_paths = options.nvme_paths;
  so.pin_memory = options.pin_memory;
  so.checksums = options.checksums;
  so.rank = options.rank;
  so.budget = budget;
  so.device = device;
  so.buffer_count = options.buffer_count;
  so.pipeline_read = options.pipeline_read;
  so.pipeline_write = options.pipeline_write;
  auto swapper = OptimizerSwapper::Create(so, aio, &s->optimizer_);
  if (!swapper.ok()) return swapper.status().WithContext("offload_optimizer nvme");
  s->swapper_ = std::move(swapper).value();
  for (size_t i = 0; i < sub_groups.size(); ++i) {
    if (sub_groups[i].numel() == 0) {
      s->swap_index_.push_back(-1);
      continue;
    }
    auto idx = s->swapper_->AddSubGroup(sub_groups[i].numel(), 0);
    if (!idx.ok()) {
      return idx.status().WithContext("offload_optimizer nvme: reserving sub-group " +
                                      std::to_string(i) + " (" +
                                      FormatBytes(3 * sub_groups[i].numel() * sizeof(float)) + ")");
    }
    s->swap_index_.push_back(*idx);
    s->swap_to_group_.push_back(static_cast<int>(i));
  }
  s->written_.assign(sub_groups.size(), false);
  s->in_buffers_ = std::make_unique<std::atomic<uint8_t>[]>(sub_groups.size());
  for (size_t i = 0; i < sub_groups.size(); ++i) s->in_buffers_[i].store(0);

  PinnedPoolOptions po;
  po.buffer_bytes = std::max<size_t>(numel * sizeof(float), 64);
  po.buffer_count = 1;
  po.lock = options.pin_memory;
  po.device = device;
  po.budget = budget;
  po.name = "fp32 gradient partition (offload_optimizer nvme)";
  if (options.grad_chunk_numel > 0) {  // the gradients on NVMe: a sub-group's at a time in RAM
    GradRegionOptions ro;
    ro.nvme_paths = options.nvme_paths;
    ro.rank = options.rank;
    ro.checksums = options.checksums;
    ro.chunk_numel = options.grad_chunk_numel;
    ro.buffer_count = options.grad_buffer_count;
    ro.pin_memory = options.pin_memory;
    ro.device = device;
    ro.budget = budget;
    // Note [A queue for the gradients]
    // The overlapped step reads a sub-group's gradients when its update starts, after the state
    // reads of the sub-groups after it have gone out; on the swapper's queue that read waited
    // for all of them, and the disk then sat idle while it and Adam ran (bench/scale's 22-layer
    // forward: the aio queue empty between batches for a median 7 ms, 1.1 s of 7.7 s). On a
    // queue of its own (same options: one more aio thread) it goes to the disk at once.
    STRATA_ASSIGN_OR_RETURN(s->region_aio_, AioHandle::Create(aio->options()));
    auto region = GradRegion::Create(std::max<size_t>(numel, 1), ro, s->region_aio_.get());
    if (!region.ok()) return region.status().WithContext("offload_optimizer nvme");
    s->region_ = std::move(region).value();
    s->region_->set_hold([p = s.get()](size_t b, size_t e) { return p->HoldsGrads(b, e); });
    size_t largest = 1;
    for (const SubGroup& g : sub_groups) largest = std::max(largest, g.numel());
    po.buffer_bytes = largest * sizeof(float);
    po.lock = false;  // read by the CPU update only
    po.device = nullptr;
    po.name = "sub-group gradients (read from the NVMe gradient region)";
  }
  STRATA_ASSIGN_OR_RETURN(s->grad_pool_, PinnedPool::Create(po));
  s->grad_slab_ = s->grad_pool_->Acquire();
  if (s->region_ != nullptr) return s;
  s->grad_ = static_cast<float*>(s->grad_slab_.data());
  std::memset(s->grad_, 0, numel * sizeof(float));
  return s;
}

NvmeOptimizerState::~NvmeOptimizerState() {
  drain_hook_ = nullptr;
  DrainAsync().IgnoreError();  // no write in flight into a buffer or file about to go
  // The stage's budget goes back first; the lease before its pool (member order does the rest).
  if (stage_budget_bytes_ != 0) budget_->Release(Tier::kCpu, stage_budget_bytes_);
  grad_slab_ = PinnedBuffer();
}

uint64_t NvmeOptimizerState::cpu_bytes() const {
  return swapper_->buffer_bytes() + grad_slab_.size() + stage_.size() * sizeof(float) +
         (region_ != nullptr ? region_->cpu_bytes() : 0);
}

Status NvmeOptimizerState::Stage(int i, bool need_contents) {
  if (staged_ == i) return Status::Ok();
  STRATA_RETURN_IF_ERROR(DrainAsync());  // the stage goes through the swapper's buffer 0
  STRATA_RETURN_IF_ERROR(WriteStage());
  const size_t n = groups_[static_cast<size_t>(i)].numel();
  const uint64_t want = 3 * uint64_t{n} * sizeof(float);
  if (want > stage_budget_bytes_) {
    if (budget_ != nullptr) {
      STRATA_RETURN_IF_ERROR(
          budget_->Reserve(Tier::kCpu, want - stage_budget_bytes_, "nvme optimizer state staging"));
      stage_budget_bytes_ = want;
    }
  }
  stage_.resize(3 * n);
  staged_ = -1;
  float* p = stage_.data();
  if (need_contents && written_[static_cast<size_t>(i)]) {
    STRATA_RETURN_IF_ERROR(
        swapper_->ReadState(swap_index_[static_cast<size_t>(i)], p, p + n, p + 2 * n));
  } else if (need_contents) {
    std::fill(stage_.begin(), stage_.end(), 0.0f);
  }
  staged_ = i;
  stage_dirty_ = false;
  return Status::Ok();
}

Status NvmeOptimizerState::WriteStage() {
  if (staged_ < 0 || !stage_dirty_) return Status::Ok();
  STRATA_RETURN_IF_ERROR(DrainAsync());
  const size_t i = static_cast<size_t>(staged_);
  const size_t n = groups_[i].numel();
  const float* p = stage_.data();
  STRATA_RETURN_IF_ERROR(swapper_->Initialize(swap_index_[i], p, p + n, p + 2 * n));
  written_[i] = true;
  stage_dirty_ = false;
  return Status::Ok();
}

Status NvmeOptimizerState::Flush() {
  STRATA_RETURN_IF_ERROR(WriteStage());
  staged_ = -1;
  std::vector<float>().swap(stage_);
  if (budget_ != nullptr && stage_budget_bytes_ != 0) {
    budget_->Release(Tier::kCpu, stage_budget_bytes_);
  }
  stage_budget_bytes_ = 0;
  return Status::Ok();
}

Status NvmeOptimizerState::WriteUnwritten() {
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (!written_[i] && swap_index_[i] >= 0) {
      STRATA_RETURN_IF_ERROR(DrainAsync());
      break;
    }
  }
  std::vector<float> zeros;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (written_[i] || swap_index_[i] < 0) continue;
    zeros.assign(groups_[i].numel(), 0.0f);
    STRATA_RETURN_IF_ERROR(swapper_->Initialize(swap_index_[i], zeros.data()));
    written_[i] = true;
  }
  return Status::Ok();
}

Status NvmeOptimizerState::Step(int64_t step, const Hyperparams& hp, float grad_scale,
                                void* param_copy, DType copy_dtype) {
  if (param_copy == nullptr) return Step(step, hp, grad_scale, nullptr);
  FlatParamCopy flat(param_copy, copy_dtype);
  return Step(step, hp, grad_scale, &flat);
}

Status NvmeOptimizerState::Step(int64_t step, const Hyperparams& hp, float grad_scale,
                                ParamCopyTarget* copy) {
  if (step < 1) {
    return InvalidArgumentError("nvme optimizer state: step number " + std::to_string(step) +
                                " must be at least 1");
  }
  STRATA_RETURN_IF_ERROR(DrainAsync());
  TraceSpan span(tracer_, "optimizer step (nvme)", "optimizer");
  swapper_stepped_ = true;
  sg_bytes_read_ = sg_bytes_written_ = 0;
  STRATA_RETURN_IF_ERROR(Flush());
  STRATA_RETURN_IF_ERROR(WriteUnwritten());
  STRATA_RETURN_IF_ERROR(optimizer_.SetHyperparams(0, hp));
  swapper_->set_step_count(step - 1);
  const std::vector<int>& group_of = swap_to_group_;
  // Per sub-group spans: from its io() call (just before its update) to the next one (see the
  // header).
  const bool tracing = tracer_ != nullptr && tracer_->enabled();
  double sg_begin = 0;
  int sg_current = -1;
  auto end_sub_group_span = [&] {
    if (!tracing || sg_current < 0) return;
    const TraceArg args[] = {{"sub_group", static_cast<double>(sg_current)}};
    tracer_->Complete("sub-group", "optimizer", sg_begin, tracer_->NowUs(), args);
  };
  StepOptions so;
  so.grad_scale = grad_scale;
  // A gradient region's read, or the copy target's Begin / Commit (the update is then refused:
  // grads null).
  Status grads_error;
  const SubGroup* uncommitted = nullptr;  // updated, its copy not yet handed on
  Status s = swapper_->Step(
      [&](int k) {
        const int sg = group_of[static_cast<size_t>(k)];
        const SubGroup& g = groups_[static_cast<size_t>(sg)];
        SubGroupIo io;
        // The previous sub-group's update is done (io is called just before the next one).
        if (uncommitted != nullptr) {
          grads_error = copy->Commit(*uncommitted);
          uncommitted = nullptr;
          if (!grads_error.ok()) return io;
        }
        if (tracing) {
          end_sub_group_span();
          sg_current = sg;
          sg_begin = tracer_->NowUs();
        }
        // Copied, not lent: the swapper's update reads one array (and the adds are done).
        Result<GradView> grads = SubGroupGrads(sg, false);
        if (!grads.ok()) {
          grads_error = grads.status();
          return io;
        }
        io.grads = grads->At(g.flat_begin);
        io.grad_dtype = DType::kFloat32;
        if (copy != nullptr) {
          Result<uint8_t*> dst = copy->Begin(g);
          if (!dst.ok()) {
            grads_error = dst.status();
            return SubGroupIo();
          }
          io.param_copy = *dst;
          io.param_copy_dtype = copy->dtype();
          uncommitted = &g;
        }
        return io;
      },
      so);
  end_sub_group_span();
  // The last sub-group's copy (only after a step that went through: a failed update is not
  // handed on).
  if (s.ok() && grads_error.ok() && uncommitted != nullptr)
    grads_error = copy->Commit(*uncommitted);
  const OptimizerStepStats& st = swapper_->last_step();
  span.AddArg("read_wait_ms", st.read_wait_ms);
  span.AddArg("update_ms", st.update_ms);
  span.AddArg("bytes_read", static_cast<double>(st.bytes_read));
  span.AddArg("bytes_written", static_cast<double>(st.bytes_written));
  if (!grads_error.ok()) s = grads_error;
  if (!s.ok()) return s.WithContext("offload_optimizer nvme step " + std::to_string(step));
  return Status::Ok();
}

void NvmeOptimizerState::AddTo(StepBreakdown* b) const {
  b->nvme_read_bytes += sg_bytes_read_;
  b->nvme_write_bytes += sg_bytes_written_;
  if (region_ != nullptr) {  // the gradient region's traffic since the last step's figures
    const GradRegion::Stats rs = region_->TakeStats();
    b->nvme_read_bytes += rs.bytes_read;
    b->nvme_write_bytes += rs.bytes_written;
    b->grad_region_read_bytes += rs.bytes_read;
    b->grad_region_write_bytes += rs.bytes_written;
  }
  if (!swapper_stepped_) {
    b->io_wait_ms += sg_wait_ms_;
    b->cpu_adam_ms += sg_update_ms_;
    return;
  }
  const OptimizerStepStats& st = swapper_->last_step();
  b->io_wait_ms += st.read_wait_ms + st.write_wait_ms;
  b->cpu_adam_ms += st.update_ms;
  b->nvme_read_bytes += st.bytes_read;
  b->nvme_write_bytes += st.bytes_written;
}

Status NvmeOptimizerState::StepExcept(int64_t step, const Hyperparams& hp, float grad_scale,
                                      void* param_copy, DType copy_dtype,
                                      const std::vector<char>& skip) {
  if (skip.size() != groups_.size()) {
    return InvalidArgumentError("nvme optimizer state: StepExcept got " +
                                std::to_string(skip.size()) + " skip flags for " +
                                std::to_string(groups_.size()) + " sub-groups");
  }
  if (param_copy == nullptr) return StepExcept(step, hp, grad_scale, nullptr, skip);
  FlatParamCopy flat(param_copy, copy_dtype);
  return StepExcept(step, hp, grad_scale, &flat, skip);
}

Status NvmeOptimizerState::StepExcept(int64_t step, const Hyperparams& hp, float grad_scale,
                                      ParamCopyTarget* copy, const std::vector<char>& skip) {
  if (skip.size() != groups_.size()) {
    return InvalidArgumentError("nvme optimizer state: StepExcept got " +
                                std::to_string(skip.size()) + " skip flags for " +
                                std::to_string(groups_.size()) + " sub-groups");
  }
  if (std::none_of(skip.begin(), skip.end(), [](char c) { return c != 0; }) && !async_busy()) {
    return Step(step, hp, grad_scale, copy);
  }
  if (step < 1) {
    return InvalidArgumentError("nvme optimizer state: step number " + std::to_string(step) +
                                " must be at least 1");
  }
  return StepAsync(step, hp, grad_scale, copy, skip);
}

Status NvmeOptimizerState::PrepareSubGroupSteps() {
  STRATA_RETURN_IF_ERROR(Flush());
  return WriteUnwritten();
}

Status NvmeOptimizerState::UpdateSubGroup(int i, int64_t step, const Hyperparams& hp,
                                          float grad_scale, float* master, float* exp_avg,
                                          float* exp_avg_sq, void* param_copy, DType copy_dtype,
                                          bool grad_checks) {
  uint8_t* copy = nullptr;
  if (param_copy != nullptr && i >= 0 && i < num_sub_groups()) {
    copy = static_cast<uint8_t*>(param_copy) +
           groups_[static_cast<size_t>(i)].flat_begin * DTypeBytes(copy_dtype);
  }
  return UpdateSubGroupInto(i, step, hp, grad_scale, master, exp_avg, exp_avg_sq, copy, copy_dtype,
                            grad_checks);
}

Status NvmeOptimizerState::UpdateSubGroupInto(int i, int64_t step, const Hyperparams& hp,
                                              float grad_scale, float* master, float* exp_avg,
                                              float* exp_avg_sq, uint8_t* copy, DType copy_dtype,
                                              bool grad_checks) {
  if (i < 0 || i >= num_sub_groups()) {
    return InvalidArgumentError("nvme optimizer state: no sub-group " + std::to_string(i) +
                                " (there are " + std::to_string(num_sub_groups()) + ")");
  }
  const SubGroup& g = groups_[static_cast<size_t>(i)];
  const size_t n = g.numel();
  if (n == 0) return Status::Ok();
  if (region_ != nullptr) grad_checks = false;  // the region's sums are taken already
  STRATA_ASSIGN_OR_RETURN(const GradView grads, SubGroupGrads(i, true));
  // The state in its slot: the checksums fused into the update (optimizer_nvme_fused.cc).
  const int at = slot_of_.empty() ? -1 : slot_of_[static_cast<size_t>(i)];
  if (at >= 0 && swapper_->checksums() &&
      slots_[static_cast<size_t>(at)].state == Slot::State::kValid) {
    const OptimizerSwapper::StateView v = SlotState(static_cast<size_t>(at));
    if (v.params == master && v.exp_avg == exp_avg && v.exp_avg_sq == exp_avg_sq) {
      return UpdateFused(i, static_cast<size_t>(at), step, hp, grad_scale, grads, copy, copy_dtype,
                         grad_checks);
    }
  }
  // As the swapper: the copy-out fused into the update. In pieces that do not cross a lent
  // gradient's chunk edge (the same bits: CpuOptimizer computes each element alike whatever the
  // range).
  const size_t cbytes = DTypeBytes(copy_dtype);
  StepOptions so;
  so.grad_scale = grad_scale;
  for (size_t e0 = 0; e0 < n;) {
    const size_t e1 = e0 + std::min(n - e0, grads.Run(g.flat_begin + e0));
    StepTensors t;
    t.numel = e1 - e0;
    t.params = master + e0;
    t.exp_avg = exp_avg + e0;
    t.exp_avg_sq = exp_avg_sq + e0;
    t.grads = grads.At(g.flat_begin + e0);
    t.grad_dtype = DType::kFloat32;
    t.param_copy = copy == nullptr ? nullptr : copy + e0 * cbytes;
    t.param_copy_dtype = copy_dtype;
    STRATA_RETURN_IF_ERROR(
        optimizer_.StepAt(hp, step, t, so)
            .WithContext("offload_optimizer nvme: update sub-group " + std::to_string(i)));
    e0 = e1;
  }
  if (grad_checks) PrecomputeGradChecks(g.flat_begin, g.flat_end);
  return Status::Ok();
}

}  // namespace strata
