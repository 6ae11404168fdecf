// Internal: the per-ISA kernel interface. A kernel updates elements [begin, end) of one tile; the
// dispatcher (cpu_optimizer.cc) picks a table by ISA and an entry by dtype, then runs tiles in
// parallel. Every kernel computes each element with the same instruction sequence wherever it
// sits in the array (the ragged tail runs the vector code on a padded copy), so results do not
// depend on tiling or thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_adam/simd/dtype.h"

namespace strata::internal {

// Per-step constants, computed in double once per step and rounded to float.
struct StepCoeffs {
  float lr = 0;
  float beta1 = 0, one_minus_beta1 = 0;
  float beta2 = 0, one_minus_beta2 = 0;
  float eps = 0;
  float step_size = 0;        // Adam: lr / (1 - beta1^t), or lr without bias correction.
  float bc2_rsqrt = 1;        // Adam: 1 / sqrt(1 - beta2^t), or 1.
  float l2_decay = 0;         // g += l2_decay * p (Adam L2 mode, Adagrad), else 0.
  float decoupled_decay = 1;  // p *= decoupled_decay (AdamW, Lion), else 1.
  float grad_scale = 1;       // g *= grad_scale first (loss-scale unscale).
  size_t prefetch_bytes = 0;  // software prefetch distance on each fp32 stream; 0 = off.
};

// Optional fused copy-out of the updated parameter, by its element type. (Not "CopyKind": that is
// the device layer's H2D/D2H enum in offload/device/api/stream.h, one name for one concept.)
// kFloat32 writes the fp32 result twice (the master and a copy), from the same register.
enum class ParamCopy { kNone = 0, kFloat16 = 1, kBFloat16 = 2, kFloat32 = 3 };
inline constexpr int kNumGradKinds = 3;    // indexed by DType
inline constexpr int kNumParamCopies = 4;  // indexed by ParamCopy

struct KernelArgs {
  float* params = nullptr;
  const void* grads = nullptr;  // element type: the table entry's grad dtype
  float* state1 = nullptr;      // Adam/Lion exp_avg
  float* state2 = nullptr;      // Adam exp_avg_sq, Adagrad sum of squares
  void* copy = nullptr;         // element type: the entry's ParamCopy
};

using TileFn = void (*)(const StepCoeffs& c, const KernelArgs& a, size_t begin, size_t end);

struct KernelTable {
  const char* name = "";
  TileFn adam[kNumGradKinds][kNumParamCopies] = {};
  TileFn adagrad[kNumGradKinds][kNumParamCopies] = {};
  TileFn lion[kNumGradKinds][kNumParamCopies] = {};
};

// Defined in kernels_<isa>.cc. Only call the AVX ones after CpuSupports() said yes.
const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();      // AVX-512F, integer bf16 rounding
const KernelTable& Avx512Bf16Kernels();  // AVX-512F + AVX512_BF16 conversions

}  // namespace strata::internal
