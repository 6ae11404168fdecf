// CUDA kernels for the device kernel set (contract in offload/device/api/kernels.h): grid-stride
// elementwise kernels templated on the element types, and block reductions for the
// L2-norm partial sums. Conversions use CUDA's round-to-nearest-even intrinsics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "offload/device/cuda/cuda_kernels.h"

namespace strata::internal {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;

template <DType T>
struct Tag {
  static constexpr DType value = T;
};

template <DType T>
struct Elem;
template <>
struct Elem<DType::kFloat32> {
  using type = float;
  __device__ static float Load(const float* p, size_t i) { return p[i]; }
  __device__ static void Store(float* p, size_t i, float v) { p[i] = v; }
};
template <>
struct Elem<DType::kFloat16> {
  using type = __half;
  __device__ static float Load(const __half* p, size_t i) { return __half2float(p[i]); }
  __device__ static void Store(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }
};
template <>
struct Elem<DType::kBFloat16> {
  using type = __nv_bfloat16;
  __device__ static float Load(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
  __device__ static void Store(__nv_bfloat16* p, size_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
  }
};

#define STRATA_GRID_STRIDE(i, n)                                                       \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

template <DType S, DType D>
__global__ void CastKernel(const void* src, void* dst, size_t n) {
  const auto* s = static_cast<const typename Elem<S>::type*>(src);
  auto* d = static_cast<typename Elem<D>::type*>(dst);
  STRATA_GRID_STRIDE(i, n) { Elem<D>::Store(d, i, Elem<S>::Load(s, i)); }
}

template <DType T>
__global__ void ScaleKernel(const void* src, void* dst, float alpha, size_t n) {
  const auto* s = static_cast<const typename Elem<T>::type*>(src);
  auto* d = static_cast<typename Elem<T>::type*>(dst);
  STRATA_GRID_STRIDE(i, n) { Elem<T>::Store(d, i, alpha * Elem<T>::Load(s, i)); }
}

template <DType T, DType B>
__global__ void AddKernel(const void* a, const void* b, void* dst, float alpha, size_t n) {
  const auto* pa = static_cast<const typename Elem<T>::type*>(a);
  const auto* pb = static_cast<const typename Elem<B>::type*>(b);
  auto* d = static_cast<typename Elem<T>::type*>(dst);
  STRATA_GRID_STRIDE(i, n) {
    Elem<T>::Store(d, i, __fadd_rn(Elem<T>::Load(pa, i), __fmul_rn(alpha, Elem<B>::Load(pb, i))));
  }
}

template <DType T>
__global__ void FillKernel(void* dst, float value, size_t n) {
  auto* d = static_cast<typename Elem<T>::type*>(dst);
  STRATA_GRID_STRIDE(i, n) { Elem<T>::Store(d, i, value); }
}

template <DType T>
__global__ void CheckFiniteKernel(const void* src, size_t n, uint32_t* flag) {
  const auto* s = static_cast<const typename Elem<T>::type*>(src);
  int bad = 0;
  STRATA_GRID_STRIDE(i, n) { bad |= !isfinite(Elem<T>::Load(s, i)); }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;  // benign: every writer writes 1
}

// One block per chunk (grid-strided over chunks); each thread sums squares in fp32, then a
// warp-shuffle + shared-memory tree reduces the block.
template <DType T>
__global__ void L2PartialsKernel(const void* src, size_t n, float* partials, size_t parts,
                                 size_t chunk) {
  const auto* s = static_cast<const typename Elem<T>::type*>(src);
  __shared__ float warp_sums[kThreads / 32];
  for (size_t p = blockIdx.x; p < parts; p += gridDim.x) {
    const size_t begin = p * chunk < n ? p * chunk : n;
    const size_t end = begin + chunk < n ? begin + chunk : n;
    float acc = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = Elem<T>::Load(s, i);
      acc = fmaf(v, v, acc);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
      acc = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
      for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xFFFFFFFFu, acc, off);
      if (threadIdx.x == 0) partials[p] = acc;
    }
    __syncthreads();
  }
}

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

template <typename F>
void With(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(Tag<DType::kFloat32>{});
      break;
    case DType::kFloat16:
      f(Tag<DType::kFloat16>{});
      break;
    case DType::kBFloat16:
      f(Tag<DType::kBFloat16>{});
      break;
  }
}

}  // namespace

int LaunchCudaKernel(const KernelLaunch& k, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  const unsigned blocks = Blocks(k.numel);
  switch (k.op) {
    case KernelOp::kCast:
      With(k.src_dtype, [&](auto s) {
        With(k.dst_dtype, [&](auto d) {
          CastKernel<decltype(s)::value, decltype(d)::value>
              <<<blocks, kThreads, 0, stream>>>(k.src, k.dst, k.numel);
        });
      });
      break;
    case KernelOp::kScale:
      With(k.dst_dtype, [&](auto t) {
        ScaleKernel<decltype(t)::value>
            <<<blocks, kThreads, 0, stream>>>(k.src, k.dst, k.alpha, k.numel);
      });
      break;
    case KernelOp::kAdd:
      With(k.dst_dtype, [&](auto t) {
        With(k.src2_dtype, [&](auto b) {
          AddKernel<decltype(t)::value, decltype(b)::value>
              <<<blocks, kThreads, 0, stream>>>(k.src, k.src2, k.dst, k.alpha, k.numel);
        });
      });
      break;
    case KernelOp::kFill:
      With(k.dst_dtype, [&](auto t) {
        FillKernel<decltype(t)::value><<<blocks, kThreads, 0, stream>>>(k.dst, k.value, k.numel);
      });
      break;
    case KernelOp::kCheckFinite:
      With(k.src_dtype, [&](auto t) {
        CheckFiniteKernel<decltype(t)::value>
            <<<blocks, kThreads, 0, stream>>>(k.src, k.numel, k.flag);
      });
      break;
    case KernelOp::kL2NormPartials: {
      const size_t chunk = L2ChunkNumel(k.numel, k.num_partials);
      const unsigned grid =
          static_cast<unsigned>(k.num_partials < kMaxBlocks ? k.num_partials : kMaxBlocks);
      With(k.src_dtype, [&](auto t) {
        L2PartialsKernel<decltype(t)::value>
            <<<grid, kThreads, 0, stream>>>(k.src, k.numel, k.partials, k.num_partials, chunk);
      });
      break;
    }
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata::internal
