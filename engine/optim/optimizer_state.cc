#include "engine/optim/optimizer_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/units.h"
#include "offload/device/api/kernels.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata {

namespace {
constexpr size_t kNormChunk = kSquaredNormChunk;  // Note [Squared-norm order]
constexpr size_t kFlagBytes = 256;                // the flag, padded to keep partials aligned

// s + x[0]^2 + ... + x[n-1]^2, left to right in double: SquaredNormChunk's loop continued from s
// (from s = 0 it is SquaredNormChunk itself).
double ContinueSquares(double s, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

std::string Range(size_t begin, size_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}
}  // namespace

float* OptimizerState::Part::At(Array array, size_t flat) const {
  const size_t i = flat - begin;
  switch (array) {
    case Array::kMaster:
      return base + i;
    case Array::kExpAvg:
      return base + numel() + i;
    case Array::kExpAvgSq:
      return base + 2 * numel() + i;
    case Array::kGrad:
      return grad + i;
  }
  return base + i;
}

Result<std::unique_ptr<OptimizerState>> OptimizerState::Create(const PartitionLayout& layout,
                                                               const OptimizerStateOptions& options,
                                                               Device* device, TierBudget* budget) {
  if (options.tier != Tier::kDevice && options.tier != Tier::kCpu) {
    return InvalidArgumentError(
        "optimizer state: tier must be device or cpu (nvme goes through "
        "the optimizer swapper)");
  }
  const size_t numel = layout.partition_numel();
  const size_t split = options.tier == Tier::kCpu ? options.device_numel : 0;
  if (split > numel) {
    return InvalidArgumentError("optimizer state: device part of " + std::to_string(split) +
                                " elements is larger than the partition (" + std::to_string(numel) +
                                ")");
  }
  if ((options.tier == Tier::kDevice || split > 0) && device == nullptr) {
    return InvalidArgumentError("optimizer state: device memory asked for without a device");
  }
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(options.kind, options.hyperparams));
  CpuOptimizerOptions cpu_options;
  cpu_options.num_threads = options.num_threads;
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer optimizer, CpuOptimizer::Create(options.kind, cpu_options));
  std::unique_ptr<OptimizerState> s(new OptimizerState(options, std::move(optimizer)));
  s->device_ = device;
  s->numel_ = numel;
  if (options.tier == Tier::kDevice) {
    s->parts_.push_back({.begin = 0, .end = numel});
    STRATA_RETURN_IF_ERROR(s->AllocateDevicePart(&s->parts_[0], nullptr));
  } else {
    // A split with nothing on the CPU keeps an empty pinned part, so the state stays kCpu-shaped.
    if (split > 0) s->parts_.push_back({.begin = 0, .end = split});
    s->parts_.push_back({.begin = split, .end = numel});
    if (split > 0) {
      STRATA_RETURN_IF_ERROR(s->AllocateDevicePart(&s->parts_[0], options.device_grad));
    }
    STRATA_RETURN_IF_ERROR(s->AllocatePinnedPart(&s->parts_.back(), budget));
  }
  size_t kernel_numel = 0;
  for (const Part& p : s->parts_) {
    if (p.device_kernels) kernel_numel = std::max(kernel_numel, p.numel());
  }
  if (kernel_numel > 0 || std::any_of(s->parts_.begin(), s->parts_.end(),
                                      [](const Part& p) { return p.device_kernels; })) {
    STRATA_RETURN_IF_ERROR(
        s->InitDeviceKernels(kernel_numel).WithContext("optimizer state on " + device->name()));
  }
  for (const Part& p : s->parts_) {
    if (p.device_kernels) continue;
    std::memset(p.base, 0, 3 * p.numel() * sizeof(float));
    std::memset(p.grad, 0, p.numel() * sizeof(float));
  }
  return s;
}

Status OptimizerState::AllocateDevicePart(Part* part, float* external_grad) {
  const size_t arrays = external_grad != nullptr ? 3 : 4;
  const size_t bytes = std::max<size_t>(arrays * part->numel() * sizeof(float), 64);
  Result<void*> mem = device_->Allocate(bytes);
  if (!mem.ok()) {
    return mem.status().WithContext(
        "optimizer state (" + FormatBytes(bytes) + " of fp32 master, moments" +
        (external_grad != nullptr ? "" : " and gradients") +
        (split() ? " of the device sub-groups " + Range(part->begin, part->end) + ")" : ")"));
  }
  device_alloc_ = *mem;
  device_bytes_ += arrays * part->numel() * sizeof(float);
  part->base = static_cast<float*>(*mem);
  part->grad = external_grad != nullptr ? external_grad : part->base + 3 * part->numel();
  part->on_device = true;
  part->device_kernels = !device_->caps().host_accessible_memory;
  return Status::Ok();
}

Status OptimizerState::AllocatePinnedPart(Part* part, TierBudget* budget) {
  PinnedPoolOptions pool;
  pool.buffer_bytes = std::max<size_t>(4 * part->numel() * sizeof(float), 64);
  pool.buffer_count = 1;
  pool.lock = options_.pin_memory;
  pool.device = device_;
  pool.budget = budget;
  pool.name = split() ? "optimizer state of the CPU sub-groups (fp32 master, moments, gradients)"
                      : "optimizer state (fp32 master, moments, gradients)";
  STRATA_ASSIGN_OR_RETURN(pool_, PinnedPool::Create(pool));
  slab_ = pool_->Acquire();
  cpu_bytes_ += 4 * part->numel() * sizeof(float);
  part->base = static_cast<float*>(slab_.data());
  part->grad = part->base + 3 * part->numel();
  return Status::Ok();
}

Status OptimizerState::InitDeviceKernels(size_t max_device_numel) {
  STRATA_ASSIGN_OR_RETURN(stream_, device_->CreateStream());
  // One more partial than the chunks of the largest device part: a range that starts inside a
  // chunk (Note [Squared-norm order] across parts) has one short chunk more.
  host_partials_.assign(SquaredNormChunks(max_device_numel) + 1, 0.0);
  Result<void*> scratch = device_->Allocate(kFlagBytes + host_partials_.size() * sizeof(double));
  if (!scratch.ok()) return scratch.status().WithContext("norm and overflow scratch");
  scratch_ = *scratch;
  for (const Part& p : parts_) {
    if (!p.device_kernels) continue;
    STRATA_RETURN_IF_ERROR(LaunchFill(stream_, p.base, DType::kFloat32, 0.0f, 3 * p.numel()));
    STRATA_RETURN_IF_ERROR(LaunchFill(stream_, p.grad, DType::kFloat32, 0.0f, p.numel()));
  }
  return stream_.Synchronize();
}

OptimizerState::~OptimizerState() {
  if (stream_.valid()) device_->DestroyStream(stream_).IgnoreError();  // waits for its work
  if (scratch_ != nullptr) device_->Free(scratch_).IgnoreError();
  if (device_alloc_ != nullptr) device_->Free(device_alloc_).IgnoreError();
}

Status OptimizerState::status() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

void OptimizerState::Fail(const Status& s) const {
  std::lock_guard lock(error_mu_);
  if (error_.ok()) error_ = s.WithContext("optimizer state on " + device_->name());
}

float* OptimizerState::whole(int array) const {
  if (split()) return nullptr;
  return parts_[0].At(static_cast<Array>(array), 0);
}

float* OptimizerState::host_grad() const {
  const Part& p = parts_.back();
  return p.on_device ? nullptr : p.grad;
}

Status OptimizerState::Copy(const Part& part, void* dst, const void* src, size_t bytes,
                            CopyKind kind) const {
  if (bytes == 0) return Status::Ok();
  if (!part.device_kernels) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(stream_.CopyAsync(dst, src, bytes, kind));
  return stream_.Synchronize();
}

Status OptimizerState::Read(Array array, size_t offset, std::span<float> out) const {
  STRATA_RETURN_IF_ERROR(status());
  if (offset > numel_ || out.size() > numel_ - offset) {
    return InvalidArgumentError("optimizer state: read of [" + std::to_string(offset) + ", +" +
                                std::to_string(out.size()) + ") past its " +
                                std::to_string(numel_) + " elements");
  }
  const size_t end = offset + out.size();
  for (const Part& p : parts_) {
    const size_t lo = std::max(offset, p.begin), hi = std::min(end, p.end);
    if (lo >= hi) continue;
    STRATA_RETURN_IF_ERROR(Copy(p, out.data() + (lo - offset), p.At(array, lo),
                                (hi - lo) * sizeof(float), CopyKind::kDeviceToHost));
  }
  return Status::Ok();
}

Status OptimizerState::Write(Array array, size_t offset, std::span<const float> in) {
  STRATA_RETURN_IF_ERROR(status());
  if (offset > numel_ || in.size() > numel_ - offset) {
    return InvalidArgumentError("optimizer state: write of [" + std::to_string(offset) + ", +" +
                                std::to_string(in.size()) + ") past its " + std::to_string(numel_) +
                                " elements");
  }
  const size_t end = offset + in.size();
  for (const Part& p : parts_) {
    const size_t lo = std::max(offset, p.begin), hi = std::min(end, p.end);
    if (lo >= hi) continue;
    STRATA_RETURN_IF_ERROR(Copy(p, p.At(array, lo), in.data() + (lo - offset),
                                (hi - lo) * sizeof(float), CopyKind::kHostToDevice));
  }
  return Status::Ok();
}

Status OptimizerState::StepSubGroup(const SubGroup& g, int64_t step, const Hyperparams& hp,
                                    float grad_scale, void* param_copy, DType copy_dtype) const {
  STRATA_RETURN_IF_ERROR(status());
  const size_t n = g.flat_end - g.flat_begin;
  if (n == 0) return Status::Ok();
  const Part* part = nullptr;
  for (const Part& p : parts_) {
    if (g.flat_begin >= p.begin && g.flat_end <= p.end) part = &p;
  }
  if (part == nullptr) {
    return InvalidArgumentError(
        "optimizer state: sub-group " + Range(g.flat_begin, g.flat_end) +
        (g.flat_end > numel_
             ? " is past the partition of " + std::to_string(numel_) + " elements"
             : " straddles the device/CPU split at " + std::to_string(device_numel())));
  }
  if (part->device_kernels) {
    OptimizerStepLaunch l;
    l.kind = optimizer_.kind();
    l.hp = hp;
    l.step = step;
    l.grad_scale = grad_scale;
    l.numel = n;
    l.params = part->At(Array::kMaster, g.flat_begin);
    l.grads = part->At(Array::kGrad, g.flat_begin);
    l.exp_avg = part->At(Array::kExpAvg, g.flat_begin);
    l.exp_avg_sq = part->At(Array::kExpAvgSq, g.flat_begin);
    if (param_copy != nullptr) {
      l.param_copy = static_cast<uint8_t*>(param_copy) + g.flat_begin * DTypeBytes(copy_dtype);
      l.param_copy_dtype = copy_dtype;
    }
    STRATA_RETURN_IF_ERROR(LaunchOptimizerStep(stream_, l));
    return stream_.Synchronize();
  }
  StepTensors t;
  t.numel = n;
  t.params = part->At(Array::kMaster, g.flat_begin);
  t.grads = part->At(Array::kGrad, g.flat_begin);
  t.grad_dtype = DType::kFloat32;
  t.exp_avg = optimizer_.kind() == OptimizerKind::kAdagrad ? nullptr
                                                           : part->At(Array::kExpAvg, g.flat_begin);
  t.exp_avg_sq = optimizer_.kind() == OptimizerKind::kLion
                     ? nullptr
                     : part->At(Array::kExpAvgSq, g.flat_begin);
  if (param_copy != nullptr) {  // fused into the update (fp32: a second store)
    t.param_copy = static_cast<uint8_t*>(param_copy) + g.flat_begin * DTypeBytes(copy_dtype);
    t.param_copy_dtype = copy_dtype;
  }
  StepOptions so;
  so.grad_scale = grad_scale;
  STRATA_RETURN_IF_ERROR(optimizer_.StepAt(hp, step, t, so));
  return Status::Ok();
}

// Note [Squared-norm order] across parts: the chunks are those of the whole range [begin, end)
// whatever the split, and a chunk that straddles it is summed on, element after element, from
// where the device part left it; chunk sums are added to one running total left to right. So a
// split state gives the bits of an unsplit one, and of every other placement.
Status OptimizerState::AddSquares(const Part& part, size_t lo, size_t hi, double* total,
                                  double* chunk_sum, size_t* chunk_end) const {
  size_t i = lo;
  if (!part.device_kernels) {
    while (i < hi) {
      if (i == *chunk_end) {
        *total += *chunk_sum;
        *chunk_sum = 0;
        *chunk_end = i + kNormChunk;
        // Whole chunks from here: their sums in parallel (SquaredNormChunkSums: each chunk's own
        // loop, so the same bits), added in order; the last stays open as the device part does.
        const size_t whole = (hi - i) / kNormChunk;
        if (whole > 1) {
          host_norm_sums_.resize(whole);
          ParallelSquaredNormChunkSums(part.At(Array::kGrad, i), whole * kNormChunk,
                                       host_norm_sums_.data());
          for (size_t c = 0; c + 1 < whole; ++c) *total += host_norm_sums_[c];
          *chunk_sum = host_norm_sums_[whole - 1];
          i += whole * kNormChunk;
          *chunk_end = i;
          continue;
        }
      }
      const size_t stop = std::min(hi, *chunk_end);
      *chunk_sum = ContinueSquares(*chunk_sum, part.At(Array::kGrad, i), stop - i);
      i = stop;
    }
    return Status::Ok();
  }
  if (i < hi && i != *chunk_end) {  // the rest of a chunk begun in an earlier part, via the host
    const size_t stop = std::min(hi, *chunk_end);
    std::vector<float> head(stop - i);
    STRATA_RETURN_IF_ERROR(Copy(part, head.data(), part.At(Array::kGrad, i),
                                head.size() * sizeof(float), CopyKind::kDeviceToHost));
    *chunk_sum = ContinueSquares(*chunk_sum, head.data(), head.size());
    i = stop;
  }
  if (i >= hi) return Status::Ok();
  *total += *chunk_sum;  // i == *chunk_end: whole chunks from here, the last maybe left open
  const size_t chunks = SquaredNormChunks(hi - i);
  auto* partials = reinterpret_cast<double*>(static_cast<uint8_t*>(scratch_) + kFlagBytes);
  STRATA_RETURN_IF_ERROR(
      LaunchSquaredNormPartials(stream_, partials, part.At(Array::kGrad, i), hi - i));
  STRATA_RETURN_IF_ERROR(stream_.CopyAsync(host_partials_.data(), partials, chunks * sizeof(double),
                                           CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(stream_.Synchronize());
  for (size_t c = 0; c + 1 < chunks; ++c) *total += host_partials_[c];
  *chunk_sum = host_partials_[chunks - 1];
  *chunk_end = i + chunks * kNormChunk;
  return Status::Ok();
}

double OptimizerState::GradSquaredNorm(size_t begin, size_t end) const {
  end = std::min(end, numel_);
  if (begin >= end) return 0;
  double total = 0, chunk_sum = 0;
  size_t chunk_end = begin;  // the first element opens the first chunk
  for (const Part& p : parts_) {
    const size_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
    if (lo >= hi) continue;
    Status s = AddSquares(p, lo, hi, &total, &chunk_sum, &chunk_end);
    if (!s.ok()) {
      Fail(s.WithContext("gradient norm"));
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  return total + chunk_sum;
}

bool OptimizerState::GradHasNonFinite(size_t begin, size_t end) const {
  end = std::min(end, numel_);
  bool bad = false;
  for (const Part& p : parts_) {
    const size_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
    if (lo >= hi) continue;
    const float* g = p.At(Array::kGrad, lo);
    if (!p.device_kernels) {
      for (size_t i = 0; i < hi - lo; ++i) bad |= !std::isfinite(g[i]);
      continue;
    }
    auto* flag = static_cast<uint32_t*>(scratch_);
    host_flag_ = 0;
    Status s = stream_.CopyAsync(flag, &host_flag_, sizeof(uint32_t), CopyKind::kHostToDevice);
    if (s.ok()) s = LaunchCheckFinite(stream_, flag, g, DType::kFloat32, hi - lo);
    if (s.ok()) s = stream_.CopyAsync(&host_flag_, flag, sizeof(uint32_t), CopyKind::kDeviceToHost);
    if (s.ok()) s = stream_.Synchronize();
    if (!s.ok()) {
      Fail(s.WithContext("overflow check"));
      return true;
    }
    bad |= host_flag_ != 0;
  }
  return bad;
}

void OptimizerState::ZeroGrad(bool host_parts) const {
  for (const Part& p : parts_) {
    if (!p.on_device && !host_parts) continue;
    if (!p.device_kernels) {
      std::memset(p.grad, 0, p.numel() * sizeof(float));
      continue;
    }
    Status s = LaunchFill(stream_, p.grad, DType::kFloat32, 0.0f, p.numel());
    if (s.ok()) s = stream_.Synchronize();
    if (!s.ok()) Fail(s.WithContext("zeroing the gradients"));
  }
}

}  // namespace strata
