// CUDA kernel of cached_attention (nn/ops/ops.h; the host kernel nn/host/host_cached_attention.cc
// is the reference): one block per (query row, head). The scores of the query against cache rows
// first..pos (first = 0, or pos - window + 1 with a sliding window, whose rolling cache keeps
// position j in row j % cache_len) go to shared memory, a block
// max and sum make the softmax, and each thread then sums one output column over the rows. A row
// with a position outside [0, cache_len) writes zeros (the op table's index check reports it).
#include <cuda_runtime.h>

#include "nn/cuda/cuda_device_util.cuh"
#include "nn/cuda/cuda_nn_kernels.h"

namespace strata::nn::internal::cuda {
namespace {

constexpr int kAttnThreads = 128;

__global__ void CachedAttentionKernel(int64_t q_len, int64_t cache_len, int64_t heads,
                                      int64_t kv_heads, int64_t head_dim, int64_t window,
                                      float scale, const float* q, const float* k_cache,
                                      const float* v_cache, const int32_t* pos, float* out) {
  extern __shared__ float smem[];  // [cache_len] scores, then 32 for reductions
  float* scores = smem;
  float* red = smem + cache_len;
  const int64_t r = blockIdx.x / heads, h = blockIdx.x % heads, b = r / q_len;
  const int64_t D = head_dim, q_ld = heads * D, kv_ld = kv_heads * D;
  float* o = out + r * q_ld + h * D;
  const int32_t p = pos[r];
  if (p < 0 || (window == 0 && p >= cache_len)) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = 0.0f;
    return;
  }
  const int64_t first = window > 0 && p >= window ? p - window + 1 : 0;
  const int64_t len = static_cast<int64_t>(p) + 1 - first, group = heads / kv_heads;
  const float* qv = q + r * q_ld + h * D;
  const float* k = k_cache + b * cache_len * kv_ld + (h / group) * D;
  const float* v = v_cache + b * cache_len * kv_ld + (h / group) * D;
  const int64_t row0 = first % cache_len, wrap = cache_len - row0;  // rolling: see ops.h
  float mx = -3.0e38f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    float s = 0.0f;
    const float* kr = k + (j < wrap ? row0 + j : j - wrap) * kv_ld;
    for (int64_t d = 0; d < D; ++d) s += qv[d] * kr[d];
    s *= scale;
    scores[j] = s;
    mx = s > mx ? s : mx;
  }
  mx = BlockReduce(mx, MaxOp{}, -3.0e38f, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float e = expf(scores[j] - mx);
    scores[j] = e;
    sum += e;
  }
  sum = BlockReduce(sum, SumOp{}, 0.0f, red);
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      acc += scores[j] * v[(j < wrap ? row0 + j : j - wrap) * kv_ld + d];
    }
    o[d] = acc * inv;
  }
}

}  // namespace

int LaunchCachedAttention(int64_t batch, int64_t q_len, int64_t cache_len, int64_t heads,
                          int64_t kv_heads, int64_t head_dim, int64_t window, float scale,
                          const float* q, const float* k_cache, const float* v_cache,
                          const int32_t* pos, float* out, void* stream) {
  const size_t shared = static_cast<size_t>(cache_len + 32) * sizeof(float);
  if (shared > 48 * 1024) return static_cast<int>(cudaErrorInvalidConfiguration);
  const int64_t blocks = batch * q_len * heads;
  CachedAttentionKernel<<<static_cast<unsigned>(blocks), kAttnThreads, shared,
                          static_cast<cudaStream_t>(stream)>>>(
      q_len, cache_len, heads, kv_heads, head_dim, window, scale, q, k_cache, v_cache, pos, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata::nn::internal::cuda
