// CUDA kernels for the element- and row-wise nn ops: dtype conversion for GEMM operands, index
// validation, embedding lookup / scatter-add, RMSNorm, RoPE and SwiGLU. Contracts are in
// cuda_nn_kernels.h; the math follows nn/host/ line by line (fp32 statistics, same formulas).
#include <cuda_runtime.h>

#include <cstdint>

#include "nn/cuda/cuda_device_util.cuh"
#include "nn/cuda/cuda_nn_kernels.h"

namespace strata::nn::internal::cuda {
namespace {

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }
int Err() { return static_cast<int>(cudaGetLastError()); }

// --- GEMM operand layout ------------------------------------------------------------------------
__global__ void ToFloatKernel(const void* src, DType t, int64_t rows, int64_t cols, int64_t ld,
                              int64_t stride, int64_t total, float* dst) {
  const int64_t per = rows * cols;
  STRATA_NN_GRID_STRIDE(e, total) {
    const int64_t b = e / per, r = (e % per) / cols, c = e % cols;
    dst[e] = LoadF(src, t, b * stride + r * ld + c);
  }
}

__global__ void AccumulateKernel(const float* src, int64_t rows, int64_t cols, int64_t total,
                                 void* dst, DType t, int64_t ld, int64_t stride) {
  const int64_t per = rows * cols;
  STRATA_NN_GRID_STRIDE(e, total) {
    const int64_t b = e / per, r = (e % per) / cols, c = e % cols;
    AccumulateF(dst, t, b * stride + r * ld + c, src[e]);
  }
}

__global__ void ScaleMatrixKernel(float* c, int64_t rows, int64_t cols, int64_t total, int64_t ld,
                                  int64_t stride, float beta) {
  const int64_t per = rows * cols;
  STRATA_NN_GRID_STRIDE(e, total) {
    const int64_t b = e / per, r = (e % per) / cols, col = e % cols;
    float* p = c + b * stride + r * ld + col;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

// --- Index validation ---------------------------------------------------------------------------
__global__ void CheckIndicesKernel(const int32_t* idx, int64_t n, int64_t limit, bool allow_ignore,
                                   unsigned long long* result) {
  __shared__ unsigned long long shared[32];
  unsigned long long first = kNoBadIndex;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t v = idx[i];
    const bool ok = (v >= 0 && v < limit) || (allow_ignore && v == -100);
    if (!ok && first == kNoBadIndex) {
      first = (static_cast<unsigned long long>(i) << 32) | static_cast<uint32_t>(v);
    }
  }
  first = BlockReduce(first, MinOp{}, static_cast<unsigned long long>(kNoBadIndex), shared);
  if (threadIdx.x == 0) *result = first;
}

// --- Embedding ----------------------------------------------------------------------------------
__global__ void EmbeddingForwardKernel(const int32_t* ids, int64_t n, const void* table, DType t,
                                       int64_t vocab, int64_t dim, float* out) {
  STRATA_NN_ROW_STRIDE(i, n) {
    const int32_t id = ids[i];
    const bool ok = id >= 0 && id < vocab;
    STRATA_NN_COL_STRIDE(j, dim) {
      out[i * dim + j] = ok ? LoadF(table, t, static_cast<int64_t>(id) * dim + j) : 0.0f;
    }
  }
}

__global__ void EmbeddingBackwardKernel(const int32_t* ids, int64_t n, const float* dout,
                                        void* dtable, DType t, int64_t vocab, int64_t dim) {
  STRATA_NN_GRID_STRIDE(j, dim) {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab) continue;
      AccumulateF(dtable, t, static_cast<int64_t>(id) * dim + j, dout[i * dim + j]);
    }
  }
}

// --- RMSNorm ------------------------------------------------------------------------------------
__global__ void RmsNormForwardKernel(const float* x, const void* w, DType wt, int64_t n,
                                     int64_t dim, float eps, float* y, float* rstd) {
  __shared__ float shared[32];
  STRATA_NN_ROW_STRIDE(i, n) {
    const float* xi = x + i * dim;
    float ss = 0.0f;
    STRATA_NN_COL_STRIDE(j, dim) { ss += xi[j] * xi[j]; }
    ss = BlockReduce(ss, SumOp{}, 0.0f, shared);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
    if (threadIdx.x == 0) rstd[i] = r;
    STRATA_NN_COL_STRIDE(j, dim) { y[i * dim + j] = xi[j] * r * LoadF(w, wt, j); }
  }
}

// dx = r * w * dy - (r^3 / dim) * x * <w * dy, x>.
__global__ void RmsNormBackwardDxKernel(const float* x, const void* w, DType wt, const float* rstd,
                                        const float* dy, int64_t n, int64_t dim, float* dx) {
  __shared__ float shared[32];
  STRATA_NN_ROW_STRIDE(i, n) {
    const float* xi = x + i * dim;
    const float* dyi = dy + i * dim;
    float dot = 0.0f;
    STRATA_NN_COL_STRIDE(j, dim) { dot += LoadF(w, wt, j) * dyi[j] * xi[j]; }
    dot = BlockReduce(dot, SumOp{}, 0.0f, shared);
    const float r = rstd[i];
    const float c = r * r * r * dot / static_cast<float>(dim);
    STRATA_NN_COL_STRIDE(j, dim) { dx[i * dim + j] = r * LoadF(w, wt, j) * dyi[j] - c * xi[j]; }
  }
}

// grid (column blocks, row blocks): partial[b, j] = sum over rows of block b of dy * x * rstd.
__global__ void RmsNormDwPartialsKernel(const float* x, const float* rstd, const float* dy,
                                        int64_t n, int64_t dim, float* partial) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= dim) return;
  for (int64_t b = blockIdx.y; b * kRmsRowBlock < n; b += gridDim.y) {
    const int64_t end = (b + 1) * kRmsRowBlock < n ? (b + 1) * kRmsRowBlock : n;
    float acc = 0.0f;
    for (int64_t i = b * kRmsRowBlock; i < end; ++i)
      acc += dy[i * dim + j] * x[i * dim + j] * rstd[i];
    partial[b * dim + j] = acc;
  }
}

__global__ void RmsNormDwReduceKernel(const float* partial, int64_t blocks, int64_t dim, void* dw,
                                      DType t) {
  STRATA_NN_GRID_STRIDE(j, dim) {
    float acc = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) acc += partial[b * dim + j];
    AccumulateF(dw, t, j, acc);
  }
}

// --- RoPE ---------------------------------------------------------------------------------------
__global__ void RopeKernel(float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos,
                           const float* sin, const int32_t* pos, int64_t max_pos, float sign) {
  const int64_t half = head_dim / 2;
  const int64_t total = n * heads * half;
  STRATA_NN_GRID_STRIDE(e, total) {
    const int64_t j = e % half, ih = e / half, i = ih / heads;
    const int32_t p = pos[i];
    if (p < 0 || p >= max_pos) continue;
    float* row = x + ih * head_dim;
    const float c = cos[static_cast<int64_t>(p) * half + j];
    const float s = sign * sin[static_cast<int64_t>(p) * half + j];
    const float a = row[j], b = row[j + half];
    row[j] = a * c - b * s;
    row[j + half] = b * c + a * s;
  }
}

// --- SwiGLU -------------------------------------------------------------------------------------
__global__ void SwiGluForwardKernel(const float* g, const float* u, int64_t n, float* h) {
  STRATA_NN_GRID_STRIDE(i, n) { h[i] = g[i] / (1.0f + expf(-g[i])) * u[i]; }
}

__global__ void SwiGluBackwardKernel(const float* g, const float* u, const float* dh, int64_t n,
                                     float* dg, float* du) {
  STRATA_NN_GRID_STRIDE(i, n) {
    const float gi = g[i], ui = u[i], dhi = dh[i];
    const float sig = 1.0f / (1.0f + expf(-gi));
    const float silu = gi * sig;
    dg[i] = dhi * ui * sig * (1.0f + gi * (1.0f - sig));
    du[i] = dhi * silu;
  }
}

}  // namespace

int LaunchToFloat(const void* src, DType src_dtype, int64_t batch, int64_t rows, int64_t cols,
                  int64_t ld, int64_t stride, float* dst, void* stream) {
  const int64_t total = batch * rows * cols;
  ToFloatKernel<<<GridFor(total), kThreads, 0, S(stream)>>>(src, src_dtype, rows, cols, ld, stride,
                                                            total, dst);
  return Err();
}

int LaunchAccumulateFromFloat(const float* src, int64_t batch, int64_t rows, int64_t cols,
                              void* dst, DType dst_dtype, int64_t ld, int64_t stride,
                              void* stream) {
  const int64_t total = batch * rows * cols;
  AccumulateKernel<<<GridFor(total), kThreads, 0, S(stream)>>>(src, rows, cols, total, dst,
                                                               dst_dtype, ld, stride);
  return Err();
}

int LaunchScaleMatrix(float* c, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                      int64_t stride, float beta, void* stream) {
  const int64_t total = batch * rows * cols;
  ScaleMatrixKernel<<<GridFor(total), kThreads, 0, S(stream)>>>(c, rows, cols, total, ld, stride,
                                                                beta);
  return Err();
}

int LaunchCheckIndices(const int32_t* idx, int64_t n, int64_t limit, bool allow_ignore,
                       uint64_t* result, void* stream) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  CheckIndicesKernel<<<1, 1024, 0, S(stream)>>>(idx, n, limit, allow_ignore,
                                                reinterpret_cast<unsigned long long*>(result));
  return Err();
}

int LaunchEmbeddingForward(const int32_t* ids, int64_t n, const void* table, DType table_dtype,
                           int64_t vocab, int64_t dim, float* out, void* stream) {
  EmbeddingForwardKernel<<<RowGrid(n), kThreads, 0, S(stream)>>>(ids, n, table, table_dtype, vocab,
                                                                 dim, out);
  return Err();
}

int LaunchEmbeddingBackward(const int32_t* ids, int64_t n, const float* dout, void* dtable,
                            DType dtable_dtype, int64_t vocab, int64_t dim, void* stream) {
  EmbeddingBackwardKernel<<<GridFor(dim), kThreads, 0, S(stream)>>>(ids, n, dout, dtable,
                                                                    dtable_dtype, vocab, dim);
  return Err();
}

int LaunchRmsNormForward(const float* x, const void* w, DType w_dtype, int64_t n, int64_t dim,
                         float eps, float* y, float* rstd, void* stream) {
  RmsNormForwardKernel<<<RowGrid(n), kThreads, 0, S(stream)>>>(x, w, w_dtype, n, dim, eps, y, rstd);
  return Err();
}

int LaunchRmsNormBackwardDx(const float* x, const void* w, DType w_dtype, const float* rstd,
                            const float* dy, int64_t n, int64_t dim, float* dx, void* stream) {
  RmsNormBackwardDxKernel<<<RowGrid(n), kThreads, 0, S(stream)>>>(x, w, w_dtype, rstd, dy, n, dim,
                                                                  dx);
  return Err();
}

int LaunchRmsNormDwPartials(const float* x, const float* rstd, const float* dy, int64_t n,
                            int64_t dim, float* partial, void* stream) {
  const int64_t blocks = (n + kRmsRowBlock - 1) / kRmsRowBlock;
  const dim3 grid((static_cast<unsigned>(dim) + kThreads - 1) / kThreads,
                  static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
  RmsNormDwPartialsKernel<<<grid, kThreads, 0, S(stream)>>>(x, rstd, dy, n, dim, partial);
  return Err();
}

int LaunchRmsNormDwReduce(const float* partial, int64_t blocks, int64_t dim, void* dw,
                          DType dw_dtype, void* stream) {
  RmsNormDwReduceKernel<<<GridFor(dim), kThreads, 0, S(stream)>>>(partial, blocks, dim, dw,
                                                                  dw_dtype);
  return Err();
}

int LaunchRope(float* x, int64_t n, int64_t heads, int64_t head_dim, const float* cos,
               const float* sin, const int32_t* pos, int64_t max_pos, bool inverse, void* stream) {
  RopeKernel<<<GridFor(n * heads * (head_dim / 2)), kThreads, 0, S(stream)>>>(
      x, n, heads, head_dim, cos, sin, pos, max_pos, inverse ? -1.0f : 1.0f);
  return Err();
}

int LaunchSwiGluForward(const float* gate, const float* up, int64_t n, float* h, void* stream) {
  SwiGluForwardKernel<<<GridFor(n), kThreads, 0, S(stream)>>>(gate, up, n, h);
  return Err();
}

int LaunchSwiGluBackward(const float* gate, const float* up, const float* dh, int64_t n,
                         float* dgate, float* dup, void* stream) {
  SwiGluBackwardKernel<<<GridFor(n), kThreads, 0, S(stream)>>>(gate, up, dh, n, dgate, dup);
  return Err();
}

}  // namespace strata::nn::internal::cuda
