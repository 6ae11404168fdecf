// Device-side helpers shared by the nn CUDA kernels: dtype-dispatched loads/stores (round to
// nearest even, like core/half.h), grid-stride loops, launch shapes and a block reduction.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace strata::nn::internal::cuda {

constexpr int kThreads = 256;       // threads per block for every kernel here
constexpr int64_t kMaxGrid = 8192;  // grid-stride loops cover the rest

inline unsigned GridFor(int64_t items, int64_t per_block = kThreads) {
  int64_t b = (items + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < kMaxGrid ? b : kMaxGrid);
}

// One block per row (grid-strided past kMaxGrid rows).
inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows < kMaxGrid ? rows : kMaxGrid));
}

#define STRATA_NN_GRID_STRIDE(i, n)                                                      \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

#define STRATA_NN_ROW_STRIDE(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

#define STRATA_NN_COL_STRIDE(j, cols) for (int64_t j = threadIdx.x; j < (cols); j += blockDim.x)

__device__ inline float LoadF(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0.0f;
}

__device__ inline void StoreF(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      return;
    case DType::kFloat16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      return;
  }
}

// p[i] (dtype t) += v in fp32, rounded once — the host's AccumulateFromFloat.
__device__ inline void AccumulateF(void* p, DType t, int64_t i, float v) {
  StoreF(p, t, i, __fadd_rn(LoadF(p, t, i), v));
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
// The host's `a > b ? a : b` (same NaN behaviour as nn/host).
struct MaxOp {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct MinOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};

// Reduces `v` over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the
// result. `shared` holds 32 values; the call starts and ends with a barrier, so back-to-back
// reductions may reuse it. The combination order is fixed by the block shape (deterministic).
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T identity, T* shared) {
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x + 31) / 32;
    v = lane < warps ? shared[lane] : identity;
    for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, off));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const T result = shared[0];
  __syncthreads();
  return result;
}

}  // namespace strata::nn::internal::cuda
