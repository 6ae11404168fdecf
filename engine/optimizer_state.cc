#include "engine/optimizer_state.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/units.h"

namespace strata {

namespace {
constexpr size_t kNormChunk = 4096;
}  // namespace

Result<std::unique_ptr<OptimizerState>> OptimizerState::Create(const PartitionLayout& layout,
                                                               const OptimizerStateOptions& options,
                                                               Device* device, TierBudget* budget) {
  if (options.tier != Tier::kDevice && options.tier != Tier::kCpu) {
    return InvalidArgumentError(
        "optimizer state: tier must be device or cpu (nvme goes through "
        "the optimizer swapper)");
  }
  if (options.tier == Tier::kDevice && !device->caps().host_accessible_memory) {
    return UnimplementedError(
        "optimizer state on " + device->name() +
        ": the optimizer step on device memory needs the device optimizer kernels (issue #17); "
        "use zero_optimization.offload_optimizer.device = cpu");
  }
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(options.kind, options.hyperparams));
  CpuOptimizerOptions cpu_options;
  cpu_options.num_threads = options.num_threads;
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer optimizer, CpuOptimizer::Create(options.kind, cpu_options));
  std::unique_ptr<OptimizerState> s(new OptimizerState(options, std::move(optimizer)));
  s->device_ = device;
  s->numel_ = layout.partition_numel();
  const size_t bytes = std::max<size_t>(s->size_bytes(), 64);
  if (options.tier == Tier::kCpu) {
    PinnedPoolOptions pool;
    pool.buffer_bytes = bytes;
    pool.buffer_count = 1;
    pool.lock = options.pin_memory;
    pool.device = device;
    pool.budget = budget;
    pool.name = "optimizer state (fp32 master, moments, gradients)";
    STRATA_ASSIGN_OR_RETURN(s->pool_, PinnedPool::Create(pool));
    s->slab_ = s->pool_->Acquire();
    s->base_ = static_cast<float*>(s->slab_.data());
  } else {
    Result<void*> mem = device->Allocate(bytes);
    if (!mem.ok()) {
      return mem.status().WithContext("optimizer state (" + FormatBytes(bytes) +
                                      " of fp32 master, moments and gradients)");
    }
    s->base_ = static_cast<float*>(*mem);
  }
  std::memset(s->base_, 0, s->size_bytes());
  return s;
}

OptimizerState::~OptimizerState() {
  if (options_.tier == Tier::kDevice && base_ != nullptr) device_->Free(base_).IgnoreError();
}

Status OptimizerState::StepSubGroup(const SubGroup& g, int64_t step, const Hyperparams& hp,
                                    float grad_scale, void* param_copy, DType copy_dtype) const {
  const size_t n = g.flat_end - g.flat_begin;
  if (n == 0) return Status::Ok();
  StepTensors t;
  t.numel = n;
  t.params = master() + g.flat_begin;
  t.grads = grad() + g.flat_begin;
  t.grad_dtype = DType::kFloat32;
  t.exp_avg = optimizer_.kind() == OptimizerKind::kAdagrad ? nullptr : exp_avg() + g.flat_begin;
  t.exp_avg_sq = optimizer_.kind() == OptimizerKind::kLion ? nullptr : exp_avg_sq() + g.flat_begin;
  const bool fused_copy = param_copy != nullptr && copy_dtype != DType::kFloat32;
  if (fused_copy) {
    t.param_copy = static_cast<uint8_t*>(param_copy) + g.flat_begin * DTypeBytes(copy_dtype);
    t.param_copy_dtype = copy_dtype;
  }
  StepOptions so;
  so.grad_scale = grad_scale;
  STRATA_RETURN_IF_ERROR(optimizer_.StepAt(hp, step, t, so));
  if (param_copy != nullptr && !fused_copy) {
    std::memcpy(static_cast<float*>(param_copy) + g.flat_begin, t.params, n * sizeof(float));
  }
  return Status::Ok();
}

double OptimizerState::GradSquaredNorm(size_t begin, size_t end) const {
  const float* g = grad();
  double total = 0;
  for (size_t c = begin; c < end; c += kNormChunk) {
    const size_t stop = std::min(end, c + kNormChunk);
    double chunk = 0;
    for (size_t i = c; i < stop; ++i) chunk += double(g[i]) * double(g[i]);
    total += chunk;
  }
  return total;
}

bool OptimizerState::GradHasNonFinite(size_t begin, size_t end) const {
  const float* g = grad();
  bool bad = false;
  for (size_t i = begin; i < end; ++i) bad |= !std::isfinite(g[i]);
  return bad;
}

void OptimizerState::ZeroGrad() const { std::memset(grad(), 0, numel_ * sizeof(float)); }

}  // namespace strata
