// Launchers for the CUDA kernels of the nn op set (cuda_nn_kernels.cu, cuda_softmax_kernels.cu).
// C++17-clean and free of CUDA includes so the .cu files (CUDA_STANDARD 17) and the C++20 op
// table share it: streams are cudaStream_t passed as void*, results are cudaError_t as int
// (0 = cudaSuccess, the launch's own error; execution errors surface at the next sync).
//
// Arguments were checked by nn/ops/ops.cc; the math and its argument meanings are those of the host
// kernels (nn/host/), which are the reference. Indices (token ids, positions, labels) are NOT
// trusted: a kernel skips a row whose index is out of range (writing zeros where it would write a
// result) and LaunchCheckIndices reports the first such index to the host.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata::nn::internal::cuda {

// What LaunchCheckIndices writes when every index is in range.
inline constexpr uint64_t kNoBadIndex = ~uint64_t{0};

// --- Layout helpers for GEMM (batch matrices of rows x cols with row stride ld, matrix stride
// `stride`; dense means ld == cols and stride == rows * cols) -------------------------------------
// dst (dense fp32) = float(src).
int LaunchToFloat(const void* src, DType src_dtype, int64_t batch, int64_t rows, int64_t cols,
                  int64_t ld, int64_t stride, float* dst, void* stream);
// dst (dtype, strided) += src (dense fp32), in fp32, rounded once.
int LaunchAccumulateFromFloat(const float* src, int64_t batch, int64_t rows, int64_t cols,
                              void* dst, DType dst_dtype, int64_t ld, int64_t stride, void* stream);
// c (fp32, strided) = beta * c (beta == 0 writes zeros, NaN-free): the k == 0 GEMM.
int LaunchScaleMatrix(float* c, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                      int64_t stride, float beta, void* stream);

// --- Index validation ----------------------------------------------------------------------------
// Scans idx[0, n) for values outside [0, limit) (a value equal to -100 passes when
// allow_ignore), and writes to *result (device-visible, e.g. mapped pinned memory) the first bad
// one as (position << 32 | uint32(value)), or kNoBadIndex. One block; deterministic.
int LaunchCheckIndices(const int32_t* idx, int64_t n, int64_t limit, bool allow_ignore,
                       uint64_t* result, void* stream);

// --- Embedding -----------------------------------------------------------------------------------
// out[i, :] = table[ids[i], :] (fp32); rows with a bad id are zero.
int LaunchEmbeddingForward(const int32_t* ids, int64_t n, const void* table, DType table_dtype,
                           int64_t vocab, int64_t dim, float* out, void* stream);
// dtable[ids[i], :] += dout[i, :]. Deterministic and sort-free: each thread owns one column and
// adds the tokens in order 0..n-1, rounding each add to dtable's dtype — the host's order, so the
// result is bit-identical to the host backend's.
int LaunchEmbeddingBackward(const int32_t* ids, int64_t n, const float* dout, void* dtable,
                            DType dtable_dtype, int64_t vocab, int64_t dim, void* stream);

// --- RMSNorm -------------------------------------------------------------------------------------
int LaunchRmsNormForward(const float* x, const void* w, DType w_dtype, int64_t n, int64_t dim,
                         float eps, float* y, float* rstd, void* stream);
// dx[i, :] (overwrite; skipped when dx is null).
int LaunchRmsNormBackwardDx(const float* x, const void* w, DType w_dtype, const float* rstd,
                            const float* dy, int64_t n, int64_t dim, float* dx, void* stream);
// Rows in blocks of kRmsRowBlock: partial[b, :] = sum over the block's rows of dy * x * rstd.
inline constexpr int64_t kRmsRowBlock = 64;
int LaunchRmsNormDwPartials(const float* x, const float* rstd, const float* dy, int64_t n,
                            int64_t dim, float* partial, void* stream);
// dw += sum_b partial[b, :] (blocks summed in order, then rounded once to dw's dtype).
int LaunchRmsNormDwReduce(const float* partial, int64_t blocks, int64_t dim, void* dw,
                          DType dw_dtype, void* stream);

// --- RoPE (rotate-half, in place); tokens with a bad position are left as they are --------------
int LaunchRope(float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos,
               const float* sin, const int32_t* pos, int64_t max_pos, bool inverse, void* stream);

// --- SwiGLU --------------------------------------------------------------------------------------
int LaunchSwiGluForward(const float* gate, const float* up, int64_t n, float* h, void* stream);
// dgate/dup may alias gate/up (each element is read before it is written, by the same thread).
int LaunchSwiGluBackward(const float* gate, const float* up, const float* dh, int64_t n,
                         float* dgate, float* dup, void* stream);

// --- Attention pieces (cuda_softmax_kernels.cu) --------------------------------------------------
// `rows` rows of length t, row r being row (r % t) of a causal t x t score matrix: s[0..i] ->
// softmax, s[i+1..t) -> 0, in place.
int LaunchCausalSoftmax(float* s, int64_t rows, int64_t t, const int32_t* row_start, int64_t heads,
                        void* stream);
// One t x t head: ds[i, j] = p[i, j] * (ds[i, j] - <p[i, :], ds[i, :]>) * scale for j <= i, and 0
// above the diagonal (ds holds dP on entry).
int LaunchCausalSoftmaxBackward(const float* p, float* ds, int64_t t, float scale, void* stream);

// --- Fused softmax cross-entropy (shifted labels, -100 ignored) ----------------------------------
// lse[r] for every scored row r (others untouched), then loss[0] = sum (lse - logit[target]) /
// num_valid, summed in double in a fixed order (0 when num_valid == 0); `accumulate` adds it to
// loss[0]. `shifted`: row r is scored against labels[r] (already shifted by the caller).
int LaunchCrossEntropyForward(const float* logits, const int32_t* labels, int64_t batch,
                              int64_t seq, int64_t vocab, bool shifted, bool accumulate,
                              int64_t num_valid, float* lse, float* loss, void* stream);
// logits <- (softmax - onehot) * scale per scored row; unscored rows -> 0.
int LaunchCrossEntropyBackward(float* logits, const int32_t* labels, int64_t batch, int64_t seq,
                               int64_t vocab, bool shifted, const float* lse, float scale,
                               void* stream);

// --- Attention against a KV cache (cuda_cached_attention.cu) -------------------------------------
// cached_attention's math (nn/ops/ops.h); cache_len + 32 floats of shared memory per block
// (cudaErrorInvalidConfiguration above 48 KiB: caches past ~12k positions).
int LaunchCachedAttention(int64_t batch, int64_t q_len, int64_t cache_len, int64_t heads,
                          int64_t kv_heads, int64_t head_dim, int64_t window, float scale,
                          const float* q, const float* k_cache, const float* v_cache,
                          const int32_t* pos, float* out, void* stream);

}  // namespace strata::nn::internal::cuda
