#include "offload/device/optim/optimizer_kernels.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "offload/device/optim/norm_chunks_avx2.h"

namespace strata {
namespace {

bool OptimizerAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

OptimizerKernelKind KernelKind(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return OptimizerKernelKind::kAdam;
    case OptimizerKind::kAdagrad:
      return OptimizerKernelKind::kAdagrad;
    case OptimizerKind::kLion:
      return OptimizerKernelKind::kLion;
  }
  return OptimizerKernelKind::kAdam;
}

struct Span {
  const char* name;
  uintptr_t begin, end;
};

Status ValidateStep(const OptimizerStepLaunch& l) {
  const std::string where = "optimizer step (" + std::string(OptimizerKindName(l.kind)) + ")";
  auto bad = [&](const std::string& why) { return InvalidArgumentError(where + ": " + why); };
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(l.kind, l.hp).WithContext(where));
  if (l.step < 1) return bad("step " + std::to_string(l.step) + " (allowed: >= 1)");
  if (!std::isfinite(l.grad_scale) || l.grad_scale <= 0) {
    return bad("grad_scale " + std::to_string(l.grad_scale) + " (allowed: finite and > 0)");
  }
  const bool wants_m = l.kind != OptimizerKind::kAdagrad;
  const bool wants_v = l.kind != OptimizerKind::kLion;
  Span spans[5];
  int n = 0;
  auto add = [&](const char* what, const void* p, size_t elem) -> Status {
    if (p == nullptr) return bad(std::string(what) + " is null");
    if (!OptimizerAligned(p, elem)) {
      return bad(std::string(what) + " is not aligned to " + std::to_string(elem) + " bytes");
    }
    const auto a = reinterpret_cast<uintptr_t>(p);
    spans[n++] = {what, a, a + l.numel * elem};
    return Status::Ok();
  };
  STRATA_RETURN_IF_ERROR(add("params", l.params, 4));
  STRATA_RETURN_IF_ERROR(add("grads", l.grads, 4));
  if (wants_m) STRATA_RETURN_IF_ERROR(add("exp_avg", l.exp_avg, 4));
  if (wants_v) STRATA_RETURN_IF_ERROR(add("exp_avg_sq", l.exp_avg_sq, 4));
  if (l.param_copy != nullptr) {
    STRATA_RETURN_IF_ERROR(add("param_copy", l.param_copy, DTypeBytes(l.param_copy_dtype)));
  }
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (spans[i].begin < spans[j].end && spans[j].begin < spans[i].end) {
        return bad(std::string(spans[i].name) + " and " + spans[j].name +
                   " overlap (all arrays must be distinct)");
      }
    }
  }
  return Status::Ok();
}

Result<const OptimizerKernelTable*> TableOf(const Stream& stream, const char* what) {
  if (!stream.valid()) return FailedPreconditionError(std::string(what) + ": empty stream handle");
  const DeviceKind kind = stream.device()->kind();
  const OptimizerKernelTable* t = OptimizerKernelsFor(kind);
  if (t == nullptr) {
    return UnimplementedError(std::string(what) + ": no optimizer kernels for device kind " +
                              DeviceKindName(kind) + " in this build");
  }
  return t;
}

}  // namespace

// Mirrors MakeCoeffs in cpu_adam/cpu_optimizer.cc line for line (same double arithmetic, same
// roundings), so the host and CUDA backends start every step from identical coefficients; the
// kernel tests check the result against CpuOptimizer.
OptimizerKernelArgs MakeOptimizerKernelArgs(const OptimizerStepLaunch& l) {
  const Hyperparams& hp = l.hp;
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, wd = hp.weight_decay;
  OptimizerKernelArgs a;
  a.kind = KernelKind(l.kind);
  a.numel = l.numel;
  a.params = l.params;
  a.grads = l.grads;
  a.exp_avg = l.kind == OptimizerKind::kAdagrad ? nullptr : l.exp_avg;
  a.exp_avg_sq = l.kind == OptimizerKind::kLion ? nullptr : l.exp_avg_sq;
  a.param_copy = l.param_copy;
  a.param_copy_dtype = l.param_copy_dtype;
  a.lr = hp.lr;
  a.beta1 = hp.beta1;
  a.one_minus_beta1 = static_cast<float>(1.0 - b1);
  a.beta2 = hp.beta2;
  a.one_minus_beta2 = static_cast<float>(1.0 - b2);
  a.eps = hp.eps;
  a.grad_scale = l.grad_scale;
  switch (l.kind) {
    case OptimizerKind::kAdam: {
      const double t = static_cast<double>(l.step);
      const double bc1 = hp.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
      const double bc2 = hp.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
      a.step_size = static_cast<float>(lr / bc1);
      a.bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(bc2));
      a.l2_decay = hp.adam_w_mode ? 0.0f : hp.weight_decay;
      a.decoupled_decay = hp.adam_w_mode ? static_cast<float>(1.0 - lr * wd) : 1.0f;
      break;
    }
    case OptimizerKind::kAdagrad:
      a.l2_decay = hp.weight_decay;
      break;
    case OptimizerKind::kLion:
      a.decoupled_decay = static_cast<float>(1.0 - lr * wd);
      break;
  }
  return a;
}

Status LaunchOptimizerStep(const Stream& stream, const OptimizerStepLaunch& launch) {
  STRATA_ASSIGN_OR_RETURN(const OptimizerKernelTable* t, TableOf(stream, "optimizer step"));
  if (launch.numel == 0) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ValidateStep(launch));
  return t->step(stream, launch, MakeOptimizerKernelArgs(launch));
}

Status LaunchSquaredNormPartials(const Stream& stream, double* partials, const float* src,
                                 size_t numel) {
  STRATA_ASSIGN_OR_RETURN(const OptimizerKernelTable* t, TableOf(stream, "squared norm"));
  if (numel == 0) return Status::Ok();
  if (src == nullptr || !OptimizerAligned(src, 4)) {
    return InvalidArgumentError("squared norm: src is null or not 4-byte aligned");
  }
  if (partials == nullptr || !OptimizerAligned(partials, 8)) {
    return InvalidArgumentError("squared norm: partials is null or not 8-byte aligned");
  }
  return t->squared_norm_partials(stream, partials, src, numel);
}

double SquaredNormChunk(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);  // exact square, one rounding
  return s;
}

namespace internal {

void SquaredNormChunkSumsScalar(const float* x, size_t numel, double* partials) {
  constexpr size_t kC = kSquaredNormChunk;
  constexpr size_t kLanes = 8;  // chunks summed side by side
  const size_t full = numel / kC;
  size_t c = 0;
  for (; c + kLanes <= full; c += kLanes) {
    const float* base = x + c * kC;
    double s[kLanes] = {};
    for (size_t i = 0; i < kC; ++i) {
      for (size_t j = 0; j < kLanes; ++j) {
        const double v = base[j * kC + i];
        s[j] += v * v;
      }
    }
    for (size_t j = 0; j < kLanes; ++j) partials[c + j] = s[j];
  }
  for (const size_t chunks = SquaredNormChunks(numel); c < chunks; ++c) {
    partials[c] = SquaredNormChunk(x + c * kC, std::min(kC, numel - c * kC));
  }
}

}  // namespace internal

void SquaredNormChunkSums(const float* x, size_t numel, double* partials) {
  static_assert(internal::kNormChunkAvx2 == kSquaredNormChunk);
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  // AVX2: the whole groups of 8 chunks (~2.3x the scalar loop's speed), the rest as below.
  const size_t done =
      avx2 ? internal::SquaredNormChunkSumsAvx2(x, numel / kSquaredNormChunk, partials) : 0;
  const size_t at = done * kSquaredNormChunk;
  if (at < numel) internal::SquaredNormChunkSumsScalar(x + at, numel - at, partials + done);
}

void ParallelSquaredNormChunkSums(const float* x, size_t numel, double* partials) {
  tbb::parallel_for(tbb::blocked_range<size_t>(0, SquaredNormChunks(numel), 64),
                    [&](const tbb::blocked_range<size_t>& r) {
                      const size_t begin = r.begin() * kSquaredNormChunk;
                      const size_t end = std::min(numel, r.end() * kSquaredNormChunk);
                      SquaredNormChunkSums(x + begin, end - begin, partials + r.begin());
                    });
}

}  // namespace strata
