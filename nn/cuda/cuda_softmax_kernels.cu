// CUDA kernels for the softmax-shaped nn ops: the causal softmax of attention (forward and its
// row-wise backward) and the fused softmax cross-entropy over shifted labels. One block per row,
// fp32 statistics with block reductions; the loss sum is taken in double in a fixed order, so the
// result does not depend on scheduling. Contracts in cuda_nn_kernels.h; math as nn/host/.
#include <cuda_runtime.h>

#include <cstdint>

#include "nn/cuda/cuda_device_util.cuh"
#include "nn/cuda/cuda_nn_kernels.h"

namespace strata::nn::internal::cuda {
namespace {

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }
int Err() { return static_cast<int>(cudaGetLastError()); }

constexpr float kLowest = -3.402823466e38f;

// Row r scores labels[r + 1] unless r is the last token of its sequence or that label is
// ignored (or out of range: LaunchCheckIndices reports it; the row scores nothing here).
// `shifted`: the caller shifted the labels, row r scores labels[r].
__device__ inline int64_t TargetOf(const int32_t* labels, int64_t r, int64_t seq, int64_t vocab,
                                   bool shifted) {
  if (!shifted && r % seq + 1 >= seq) return -1;
  const int32_t label = shifted ? labels[r] : labels[r + 1];
  return label >= 0 && label < vocab ? label : -1;
}

// --- Attention softmax --------------------------------------------------------------------------
// Rows are [batch, heads, t]; row_start (or nullptr) gives each [batch, t] query its first key.
__global__ void CausalSoftmaxKernel(float* s, int64_t rows, int64_t t, const int32_t* row_start,
                                    int64_t heads) {
  __shared__ float shared[32];
  STRATA_NN_ROW_STRIDE(r, rows) {
    float* row = s + r * t;
    const int64_t len = r % t + 1;
    const int64_t lo = row_start != nullptr ? row_start[r / (heads * t) * t + r % t] : 0;
    float mx = kLowest;
    for (int64_t j = lo + threadIdx.x; j < len; j += blockDim.x) mx = MaxOp{}(mx, row[j]);
    mx = BlockReduce(mx, MaxOp{}, kLowest, shared);
    float sum = 0.0f;
    for (int64_t j = lo + threadIdx.x; j < len; j += blockDim.x) {
      const float e = expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    sum = BlockReduce(sum, SumOp{}, 0.0f, shared);
    const float inv = 1.0f / sum;
    STRATA_NN_COL_STRIDE(j, t) { row[j] = j >= lo && j < len ? row[j] * inv : 0.0f; }
  }
}

__global__ void CausalSoftmaxBackwardKernel(const float* p, float* ds, int64_t t, float scale) {
  __shared__ float shared[32];
  STRATA_NN_ROW_STRIDE(i, t) {
    const float* pi = p + i * t;
    float* di = ds + i * t;
    const int64_t len = i + 1;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) dot += pi[j] * di[j];
    dot = BlockReduce(dot, SumOp{}, 0.0f, shared);
    STRATA_NN_COL_STRIDE(j, t) { di[j] = j < len ? pi[j] * (di[j] - dot) * scale : 0.0f; }
  }
}

// --- Cross-entropy ------------------------------------------------------------------------------
__global__ void CrossEntropyLseKernel(const float* logits, const int32_t* labels, int64_t rows,
                                      int64_t seq, int64_t vocab, bool shifted, float* lse) {
  __shared__ float shared[32];
  STRATA_NN_ROW_STRIDE(r, rows) {
    if (TargetOf(labels, r, seq, vocab, shifted) < 0) continue;  // uniform over the block
    const float* x = logits + r * vocab;
    float mx = kLowest;
    STRATA_NN_COL_STRIDE(j, vocab) { mx = MaxOp{}(mx, x[j]); }
    mx = BlockReduce(mx, MaxOp{}, kLowest, shared);
    float sum = 0.0f;
    STRATA_NN_COL_STRIDE(j, vocab) { sum += expf(x[j] - mx); }
    sum = BlockReduce(sum, SumOp{}, 0.0f, shared);
    if (threadIdx.x == 0) lse[r] = mx + logf(sum);
  }
}

// One block: loss = sum over scored rows of (lse - logit[target]) in double / num_valid.
__global__ void CrossEntropyLossKernel(const float* logits, const int32_t* labels, int64_t rows,
                                       int64_t seq, int64_t vocab, bool shifted, bool accumulate,
                                       int64_t num_valid, const float* lse, float* loss) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t target = TargetOf(labels, r, seq, vocab, shifted);
    if (target >= 0) acc += static_cast<double>(lse[r]) - logits[r * vocab + target];
  }
  acc = BlockReduce(acc, SumOp{}, 0.0, shared);
  if (threadIdx.x == 0) {
    const float l = num_valid > 0 ? static_cast<float>(acc / static_cast<double>(num_valid)) : 0.0f;
    *loss = accumulate ? *loss + l : l;
  }
}

__global__ void CrossEntropyBackwardKernel(float* logits, const int32_t* labels, int64_t rows,
                                           int64_t seq, int64_t vocab, bool shifted,
                                           const float* lse, float scale) {
  STRATA_NN_ROW_STRIDE(r, rows) {
    float* x = logits + r * vocab;
    const int64_t target = TargetOf(labels, r, seq, vocab, shifted);
    if (target < 0) {
      STRATA_NN_COL_STRIDE(j, vocab) { x[j] = 0.0f; }
      continue;
    }
    const float l = lse[r];
    STRATA_NN_COL_STRIDE(j, vocab) {
      const float g = expf(x[j] - l) * scale;
      x[j] = j == target ? g - scale : g;
    }
  }
}

}  // namespace

int LaunchCausalSoftmax(float* s, int64_t rows, int64_t t, const int32_t* row_start,
                        int64_t heads, void* stream) {
  CausalSoftmaxKernel<<<RowGrid(rows), kThreads, 0, S(stream)>>>(s, rows, t, row_start, heads);
  return Err();
}

int LaunchCausalSoftmaxBackward(const float* p, float* ds, int64_t t, float scale, void* stream) {
  CausalSoftmaxBackwardKernel<<<RowGrid(t), kThreads, 0, S(stream)>>>(p, ds, t, scale);
  return Err();
}

int LaunchCrossEntropyForward(const float* logits, const int32_t* labels, int64_t batch,
                              int64_t seq, int64_t vocab, bool shifted, bool accumulate,
                              int64_t num_valid, float* lse, float* loss, void* stream) {
  const int64_t rows = batch * seq;
  CrossEntropyLseKernel<<<RowGrid(rows), kThreads, 0, S(stream)>>>(logits, labels, rows, seq, vocab,
                                                                   shifted, lse);
  const int err = Err();
  if (err != 0) return err;
  CrossEntropyLossKernel<<<1, 1024, 0, S(stream)>>>(logits, labels, rows, seq, vocab, shifted,
                                                    accumulate, num_valid, lse, loss);
  return Err();
}

int LaunchCrossEntropyBackward(float* logits, const int32_t* labels, int64_t batch, int64_t seq,
                               int64_t vocab, bool shifted, const float* lse, float scale,
                               void* stream) {
  CrossEntropyBackwardKernel<<<RowGrid(batch * seq), kThreads, 0, S(stream)>>>(
      logits, labels, batch * seq, seq, vocab, shifted, lse, scale);
  return Err();
}

}  // namespace strata::nn::internal::cuda
