// OptimizerKernelArgs: one fused optimizer step as a device backend's kernel sees it — the
// arrays and the per-step coefficients, already computed on the host (optimizer_kernels.h).
//
// A plain C++17 struct (no CUDA types, no Status) so the CUDA backend's .cu file can include it,
// as kernel_launch.h is for the elementwise kernel set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata {

enum class OptimizerKernelKind : uint8_t { kAdam, kAdagrad, kLion };

// Per-element rules (the same as cpu_adam/simd/kernel_impl.h, FMA where it has MulAdd):
//   Adam:    g = grad*gs + l2*p; m = b1*m + omb1*g; v = b2*v + omb2*g^2;
//            p = p*dd - step_size * m / (sqrt(v)*bc2_rsqrt + eps)
//   Adagrad: g = grad*gs + l2*p; v += g^2; p -= lr * g / (sqrt(v) + eps)
//   Lion:    g = grad*gs; c = b1*m + omb1*g; p = p*dd - lr*sign(c); m = b2*m + omb2*g
struct OptimizerKernelArgs {
  OptimizerKernelKind kind = OptimizerKernelKind::kAdam;
  size_t numel = 0;
  float* params = nullptr;       // fp32 master, updated in place
  const float* grads = nullptr;  // fp32 gradients
  float* exp_avg = nullptr;      // Adam, Lion
  float* exp_avg_sq = nullptr;   // Adam, Adagrad
  void* param_copy = nullptr;    // optional: updated params as param_copy_dtype (fp32 = a copy)
  DType param_copy_dtype = DType::kBFloat16;
  float lr = 0, beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0;
  float step_size = 0, bc2_rsqrt = 1, l2_decay = 0, decoupled_decay = 1, grad_scale = 1;
};

// Note [Squared-norm order]
// The sum of squares is reproducible bit for bit on every device and every placement: [0, numel)
// is cut into chunks of kSquaredNormChunk elements (the last may be short); each chunk is summed
// in double from its first element to its last (s += x*x); the caller adds the chunk sums left to
// right in double. Squares of floats are exact in double, so only the additions round, in a fixed
// order: the host loop, the CUDA kernel and the engine's other optimizer placements (which sum
// the same way) give the same bits.
inline constexpr size_t kSquaredNormChunk = 4096;

constexpr size_t SquaredNormChunks(size_t numel) {
  return (numel + kSquaredNormChunk - 1) / kSquaredNormChunk;
}

}  // namespace strata
