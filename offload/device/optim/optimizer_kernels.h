// Device optimizer kernels: the fused optimizer step (Adam/AdamW, Adagrad, Lion) with gradient
// scaling and the compute-dtype copy-out, and a reproducible sum of squares, on any device — for
// optimizer state that lives in device memory the host cannot address (a GPU).
//
// Each call enqueues one kernel on `stream` and returns at once; argument errors come back at
// once (InvalidArgument), execution errors as in Note [Stream errors] (device.h). All pointers are
// device memory of the stream's device. The backends live in tables (host: cpu_adam's SIMD step
// and the plain loop of Note [Squared-norm order]; CUDA: kernels), picked by the device's kind in
// registry.cc, so no caller has an #ifdef.
//
// Agreement: the host backend runs cpu_adam's own kernels, so it equals CpuOptimizer::StepAt bit
// for bit; the CUDA kernels compute the same per-element rules with FMA (as cpu_adam's AVX2 and
// AVX-512 kernels do) and IEEE division and square root, so they agree with it to rounding.
// The squared-norm partials are bitwise equal on every backend (Note [Squared-norm order]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_adam/hyperparams.h"
#include "offload/device/api/device.h"
#include "offload/device/optim/optimizer_kernel_args.h"

namespace strata {

// One optimizer update of `numel` elements at step number `step` (>= 1).
struct OptimizerStepLaunch {
  OptimizerKind kind = OptimizerKind::kAdam;
  Hyperparams hp;
  int64_t step = 1;
  float grad_scale = 1.0f;  // grads are multiplied by it first; finite and > 0
  size_t numel = 0;
  float* params = nullptr;
  const float* grads = nullptr;
  float* exp_avg = nullptr;     // Adam, Lion (ignored for Adagrad)
  float* exp_avg_sq = nullptr;  // Adam, Adagrad (ignored for Lion)
  void* param_copy = nullptr;   // optional: fp16/bf16 (rounded to nearest even) or fp32 (a copy)
  DType param_copy_dtype = DType::kBFloat16;
};

// The per-step coefficients, computed in double and rounded to float exactly as cpu_adam does
// (cpu_adam/cpu_optimizer.cc), with the arrays of `launch`.
OptimizerKernelArgs MakeOptimizerKernelArgs(const OptimizerStepLaunch& launch);

Status LaunchOptimizerStep(const Stream& stream, const OptimizerStepLaunch& launch);

// partials[c] = the sum of squares of chunk c of src[0, numel), for c < SquaredNormChunks(numel),
// in the order of Note [Squared-norm order]. `partials` is device memory.
Status LaunchSquaredNormPartials(const Stream& stream, double* partials, const float* src,
                                 size_t numel);

// The same order on host memory, for one chunk of n <= kSquaredNormChunk elements: what every
// backend computes per chunk (and what host-side callers use to agree with them bit for bit).
double SquaredNormChunk(const float* x, size_t n);
// partials[c] = SquaredNormChunk of chunk c of x[0, numel), for c < SquaredNormChunks(numel): the
// same bits, several chunks' sums advanced together (independent chains: each chunk is still
// summed from its first element to its last), so it is not bound by one add's latency.
void SquaredNormChunkSums(const float* x, size_t numel, double* partials);
// The same, with the chunks split over the oneTBB threads (runs of 64 chunks; the same bits).
void ParallelSquaredNormChunkSums(const float* x, size_t numel, double* partials);

// Backend tables (registry.cc picks one by DeviceKind; nullptr if the kind is not built).
struct OptimizerKernelTable {
  const char* backend = "";
  // `launch` is validated and `args` made from it; enqueue the step on `stream` (a stream of this
  // backend's device). The host backend runs cpu_adam on `launch`, the CUDA one its kernel on
  // `args`.
  Status (*step)(const Stream& stream, const OptimizerStepLaunch& launch,
                 const OptimizerKernelArgs& args) = nullptr;
  Status (*squared_norm_partials)(const Stream& stream, double* partials, const float* src,
                                  size_t numel) = nullptr;
};
const OptimizerKernelTable* OptimizerKernelsFor(DeviceKind kind);

namespace internal {
const OptimizerKernelTable& HostOptimizerKernels();
const OptimizerKernelTable& CudaOptimizerKernels();  // defined only in CUDA builds
}  // namespace internal

}  // namespace strata
