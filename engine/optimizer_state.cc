#include "engine/optimizer_state.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/units.h"
#include "offload/device/kernels.h"
#include "offload/device/optimizer_kernels.h"

namespace strata {

namespace {
constexpr size_t kNormChunk = kSquaredNormChunk;  // Note [Squared-norm order]
constexpr size_t kFlagBytes = 256;                // the flag, padded to keep partials aligned
}  // namespace

Result<std::unique_ptr<OptimizerState>> OptimizerState::Create(const PartitionLayout& layout,
                                                               const OptimizerStateOptions& options,
                                                               Device* device, TierBudget* budget) {
  if (options.tier != Tier::kDevice && options.tier != Tier::kCpu) {
    return InvalidArgumentError(
        "optimizer state: tier must be device or cpu (nvme goes through "
        "the optimizer swapper)");
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
    s->device_kernels_ = !device->caps().host_accessible_memory;
  }
  if (s->device_kernels_) {
    STRATA_RETURN_IF_ERROR(
        s->InitDeviceKernels().WithContext("optimizer state on " + device->name()));
  } else {
    std::memset(s->base_, 0, s->size_bytes());
  }
  return s;
}

Status OptimizerState::InitDeviceKernels() {
  STRATA_ASSIGN_OR_RETURN(stream_, device_->CreateStream());
  host_partials_.assign(std::max<size_t>(SquaredNormChunks(numel_), 1), 0.0);
  Result<void*> scratch = device_->Allocate(kFlagBytes + host_partials_.size() * sizeof(double));
  if (!scratch.ok()) return scratch.status().WithContext("norm and overflow scratch");
  scratch_ = *scratch;
  STRATA_RETURN_IF_ERROR(LaunchFill(stream_, base_, DType::kFloat32, 0.0f, 4 * numel_));
  return stream_.Synchronize();
}

OptimizerState::~OptimizerState() {
  if (stream_.valid()) device_->DestroyStream(stream_).IgnoreError();  // waits for its work
  if (scratch_ != nullptr) device_->Free(scratch_).IgnoreError();
  if (options_.tier == Tier::kDevice && base_ != nullptr) device_->Free(base_).IgnoreError();
}

Status OptimizerState::status() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

void OptimizerState::Fail(const Status& s) const {
  std::lock_guard lock(error_mu_);
  if (error_.ok()) error_ = s.WithContext("optimizer state on " + device_->name());
}

float* OptimizerState::ArrayBase(Array array) const {
  switch (array) {
    case Array::kMaster:
      return master();
    case Array::kExpAvg:
      return exp_avg();
    case Array::kExpAvgSq:
      return exp_avg_sq();
    case Array::kGrad:
      return grad();
  }
  return master();
}

Status OptimizerState::Read(Array array, size_t offset, std::span<float> out) const {
  STRATA_RETURN_IF_ERROR(status());
  if (offset > numel_ || out.size() > numel_ - offset) {
    return InvalidArgumentError("optimizer state: read of [" + std::to_string(offset) + ", +" +
                                std::to_string(out.size()) + ") past its " +
                                std::to_string(numel_) + " elements");
  }
  const float* src = ArrayBase(array) + offset;
  if (!device_kernels_) {
    std::memcpy(out.data(), src, out.size_bytes());
    return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(
      stream_.CopyAsync(out.data(), src, out.size_bytes(), CopyKind::kDeviceToHost));
  return stream_.Synchronize();
}

Status OptimizerState::Write(Array array, size_t offset, std::span<const float> in) {
  STRATA_RETURN_IF_ERROR(status());
  if (offset > numel_ || in.size() > numel_ - offset) {
    return InvalidArgumentError("optimizer state: write of [" + std::to_string(offset) + ", +" +
                                std::to_string(in.size()) + ") past its " + std::to_string(numel_) +
                                " elements");
  }
  float* dst = ArrayBase(array) + offset;
  if (!device_kernels_) {
    std::memcpy(dst, in.data(), in.size_bytes());
    return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(
      stream_.CopyAsync(dst, in.data(), in.size_bytes(), CopyKind::kHostToDevice));
  return stream_.Synchronize();
}

Status OptimizerState::StepSubGroup(const SubGroup& g, int64_t step, const Hyperparams& hp,
                                    float grad_scale, void* param_copy, DType copy_dtype) const {
  STRATA_RETURN_IF_ERROR(status());
  const size_t n = g.flat_end - g.flat_begin;
  if (n == 0) return Status::Ok();
  if (device_kernels_) {
    OptimizerStepLaunch l;
    l.kind = optimizer_.kind();
    l.hp = hp;
    l.step = step;
    l.grad_scale = grad_scale;
    l.numel = n;
    l.params = master() + g.flat_begin;
    l.grads = grad() + g.flat_begin;
    l.exp_avg = exp_avg() + g.flat_begin;
    l.exp_avg_sq = exp_avg_sq() + g.flat_begin;
    if (param_copy != nullptr) {
      l.param_copy = static_cast<uint8_t*>(param_copy) + g.flat_begin * DTypeBytes(copy_dtype);
      l.param_copy_dtype = copy_dtype;
    }
    STRATA_RETURN_IF_ERROR(LaunchOptimizerStep(stream_, l));
    return stream_.Synchronize();
  }
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
  end = std::min(end, numel_);
  if (begin >= end) return 0;
  const float* g = grad();
  double total = 0;
  if (!device_kernels_) {
    for (size_t c = begin; c < end; c += kNormChunk) {
      total += SquaredNormChunk(g + c, std::min(end, c + kNormChunk) - c);
    }
    return total;
  }
  const size_t chunks = SquaredNormChunks(end - begin);
  auto* partials = reinterpret_cast<double*>(static_cast<uint8_t*>(scratch_) + kFlagBytes);
  Status s = LaunchSquaredNormPartials(stream_, partials, g + begin, end - begin);
  if (s.ok()) {
    s = stream_.CopyAsync(host_partials_.data(), partials, chunks * sizeof(double),
                          CopyKind::kDeviceToHost);
  }
  if (s.ok()) s = stream_.Synchronize();
  if (!s.ok()) {
    Fail(s.WithContext("gradient norm"));
    return std::numeric_limits<double>::quiet_NaN();
  }
  for (size_t c = 0; c < chunks; ++c) total += host_partials_[c];
  return total;
}

bool OptimizerState::GradHasNonFinite(size_t begin, size_t end) const {
  end = std::min(end, numel_);
  if (begin >= end) return false;
  const float* g = grad();
  if (!device_kernels_) {
    bool bad = false;
    for (size_t i = begin; i < end; ++i) bad |= !std::isfinite(g[i]);
    return bad;
  }
  auto* flag = static_cast<uint32_t*>(scratch_);
  host_flag_ = 0;
  Status s = stream_.CopyAsync(flag, &host_flag_, sizeof(uint32_t), CopyKind::kHostToDevice);
  if (s.ok()) s = LaunchCheckFinite(stream_, flag, g + begin, DType::kFloat32, end - begin);
  if (s.ok()) s = stream_.CopyAsync(&host_flag_, flag, sizeof(uint32_t), CopyKind::kDeviceToHost);
  if (s.ok()) s = stream_.Synchronize();
  if (!s.ok()) {
    Fail(s.WithContext("overflow check"));
    return true;
  }
  return host_flag_ != 0;
}

void OptimizerState::ZeroGrad() const {
  if (!device_kernels_) {
    std::memset(grad(), 0, numel_ * sizeof(float));
    return;
  }
  Status s = LaunchFill(stream_, grad(), DType::kFloat32, 0.0f, numel_);
  if (s.ok()) s = stream_.Synchronize();
  if (!s.ok()) Fail(s.WithContext("zeroing the gradients"));
}

}  // namespace strata
