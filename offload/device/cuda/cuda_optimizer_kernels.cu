// CUDA kernels for the device optimizer step and the reproducible sum of squares
// (offload/device/optim/optimizer_kernels.h).
//
// The step is cpu_adam's per-element rule (cpu_adam/simd/kernel_impl.h) with every operation spelt
// out as an explicitly rounded intrinsic: MulAdd -> __fmaf_rn (as the AVX2/AVX-512 kernels use
// vfmadd), division and square root IEEE (__fdiv_rn, __fsqrt_rn), no contraction left to the
// compiler. The copy-out rounds to nearest even (__float2half_rn, __float2bfloat16_rn), as
// cpu_adam does. One thread per element, grid-strided.
//
// The squared norm follows Note [Squared-norm order] (optimizer_kernel_args.h): each chunk summed
// in double from first to last element, by one lane, from coalesced tiles (see the kernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "offload/device/cuda/cuda_optimizer_kernels.h"

namespace strata::internal {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 8192;

enum class Copy { kNone, kFloat32, kFloat16, kBFloat16 };

template <Copy C>
__device__ __forceinline__ void StoreCopy(void* out, size_t i, float p) {
  if constexpr (C == Copy::kFloat32) {
    static_cast<float*>(out)[i] = p;
  } else if constexpr (C == Copy::kFloat16) {
    static_cast<__half*>(out)[i] = __float2half_rn(p);
  } else if constexpr (C == Copy::kBFloat16) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(p);
  }
}

__device__ __forceinline__ float Sign(float a) {
  return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f);
}

#define STRATA_GRID_STRIDE(i, n)                                                       \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

template <Copy C>
__global__ void AdamKernel(OptimizerKernelArgs a) {
  STRATA_GRID_STRIDE(i, a.numel) {
    float p = a.params[i];
    const float g = __fmaf_rn(p, a.l2_decay, __fmul_rn(a.grads[i], a.grad_scale));
    const float m = __fmaf_rn(a.exp_avg[i], a.beta1, __fmul_rn(g, a.one_minus_beta1));
    const float v =
        __fmaf_rn(a.exp_avg_sq[i], a.beta2, __fmul_rn(__fmul_rn(g, g), a.one_minus_beta2));
    const float denom = __fmaf_rn(__fsqrt_rn(v), a.bc2_rsqrt, a.eps);
    p = __fmaf_rn(-a.step_size, __fdiv_rn(m, denom), __fmul_rn(p, a.decoupled_decay));
    a.params[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    StoreCopy<C>(a.param_copy, i, p);
  }
}

template <Copy C>
__global__ void AdagradKernel(OptimizerKernelArgs a) {
  STRATA_GRID_STRIDE(i, a.numel) {
    float p = a.params[i];
    const float g = __fmaf_rn(p, a.l2_decay, __fmul_rn(a.grads[i], a.grad_scale));
    const float s = __fmaf_rn(g, g, a.exp_avg_sq[i]);
    const float denom = __fadd_rn(__fsqrt_rn(s), a.eps);
    p = __fmaf_rn(-a.lr, __fdiv_rn(g, denom), p);
    a.params[i] = p;
    a.exp_avg_sq[i] = s;
    StoreCopy<C>(a.param_copy, i, p);
  }
}

template <Copy C>
__global__ void LionKernel(OptimizerKernelArgs a) {
  STRATA_GRID_STRIDE(i, a.numel) {
    const float g = __fmul_rn(a.grads[i], a.grad_scale);
    float m = a.exp_avg[i];
    const float c = __fmaf_rn(m, a.beta1, __fmul_rn(g, a.one_minus_beta1));
    const float p = __fmaf_rn(-a.lr, Sign(c), __fmul_rn(a.params[i], a.decoupled_decay));
    m = __fmaf_rn(m, a.beta2, __fmul_rn(g, a.one_minus_beta2));
    a.params[i] = p;
    a.exp_avg[i] = m;
    StoreCopy<C>(a.param_copy, i, p);
  }
}

// One warp per kNormChunksPerBlock consecutive chunks. The warp walks the chunks in steps of 32
// elements: it loads the next 32 elements of each of its chunks (one coalesced 128-byte line per
// chunk) into shared memory, then lane j adds chunk j's 32 in order to its double sum — the
// sequential order of Note [Squared-norm order], with coalesced reads.
constexpr unsigned kNormChunksPerBlock = 32;

__global__ void SquaredNormKernel(double* partials, const float* src, size_t numel, size_t chunks) {
  __shared__ float tile[kNormChunksPerBlock][33];  // +1: no bank conflicts on the column reads
  const unsigned lane = threadIdx.x;
  for (size_t c0 = blockIdx.x * size_t{kNormChunksPerBlock}; c0 < chunks;
       c0 += gridDim.x * size_t{kNormChunksPerBlock}) {
    double s = 0.0;
    const size_t mine = c0 + lane;
    const size_t my_begin = mine * kSquaredNormChunk;
    const size_t my_end =
        my_begin + kSquaredNormChunk < numel ? my_begin + kSquaredNormChunk : numel;
    for (size_t k = 0; k < kSquaredNormChunk; k += 32) {
      for (unsigned r = 0; r < kNormChunksPerBlock; ++r) {
        const size_t i = (c0 + r) * kSquaredNormChunk + k + lane;
        tile[r][lane] = i < numel ? src[i] : 0.0f;
      }
      __syncwarp();
      if (mine < chunks) {
        for (unsigned j = 0; j < 32 && my_begin + k + j < my_end; ++j) {
          const double v = tile[lane][j];
          s = __dadd_rn(s, __dmul_rn(v, v));  // the square is exact; one rounding per add
        }
      }
      __syncwarp();
    }
    if (mine < chunks) partials[mine] = s;
  }
}

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

template <Copy C>
void LaunchFor(const OptimizerKernelArgs& a, cudaStream_t stream) {
  const unsigned blocks = Blocks(a.numel);
  switch (a.kind) {
    case OptimizerKernelKind::kAdam:
      AdamKernel<C><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case OptimizerKernelKind::kAdagrad:
      AdagradKernel<C><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case OptimizerKernelKind::kLion:
      LionKernel<C><<<blocks, kThreads, 0, stream>>>(a);
      break;
  }
}

}  // namespace

int LaunchCudaOptimizerStep(const OptimizerKernelArgs& a, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (a.param_copy == nullptr) {
    LaunchFor<Copy::kNone>(a, stream);
  } else {
    switch (a.param_copy_dtype) {
      case DType::kFloat32:
        LaunchFor<Copy::kFloat32>(a, stream);
        break;
      case DType::kFloat16:
        LaunchFor<Copy::kFloat16>(a, stream);
        break;
      case DType::kBFloat16:
        LaunchFor<Copy::kBFloat16>(a, stream);
        break;
    }
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchCudaSquaredNormPartials(double* partials, const float* src, size_t numel,
                                  void* cuda_stream) {
  const size_t chunks = SquaredNormChunks(numel);
  const size_t blocks = (chunks + kNormChunksPerBlock - 1) / kNormChunksPerBlock;
  const unsigned grid = static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  SquaredNormKernel<<<grid, kNormChunksPerBlock, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      partials, src, numel, chunks);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata::internal
