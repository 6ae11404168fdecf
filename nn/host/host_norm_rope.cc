// Host kernels for embedding lookup / scatter-add, RMSNorm and rotary embedding: vectorised
// row loops (STRATA_NN_SIMD), rows split over oneTBB. Reductions over rows (RMSNorm's weight
// gradient) use fixed row blocks combined in order, so results do not depend on thread count.
#include <cmath>
#include <string>
#include <vector>

#include "nn/host/host_ops.h"
#include "nn/host/simd.h"

namespace strata::nn::internal {
namespace {

constexpr int64_t kRowBlock = 32;

Status CheckIds(const int32_t* ids, int64_t n, int64_t vocab, const char* op) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgumentError(std::string(op) + ": token id " + std::to_string(ids[i]) +
                                  " at position " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(vocab) + ")");
    }
  }
  return Status::Ok();
}

STRATA_NN_SIMD float SumSquares(const float* x, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s;
}

STRATA_NN_SIMD void ScaleMul(const float* x, const float* w, float r, int64_t n, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * r * w[j];
}

// dx = r * w * dy - (r^3 / n) * x * <w * dy, x>; partial_dw += dy * x * r.
STRATA_NN_SIMD void RmsBackwardRow(const float* x, const float* w, const float* dy, float r,
                                   int64_t n, float* dx, float* partial_dw) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += w[j] * dy[j] * x[j];
  const float c = r * r * r * dot / static_cast<float>(n);
  if (dx != nullptr) {
    for (int64_t j = 0; j < n; ++j) dx[j] = r * w[j] * dy[j] - c * x[j];
  }
  if (partial_dw != nullptr) {
    for (int64_t j = 0; j < n; ++j) partial_dw[j] += dy[j] * x[j] * r;
  }
}

STRATA_NN_SIMD void RotateRow(float* x, const float* c, const float* s, int64_t half, float sign) {
  for (int64_t j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    const float sj = sign * s[j];
    x[j] = a * c[j] - b * sj;
    x[j + half] = b * c[j] + a * sj;
  }
}

}  // namespace

Status HostEmbeddingForward(const EmbeddingArgs& a) {
  STRATA_RETURN_IF_ERROR(CheckIds(a.ids, a.n, a.vocab, "embedding_forward"));
  ParallelFor(0, a.n, [&](int64_t i) {
    LoadAsFloat(a.table, a.dtype, static_cast<int64_t>(a.ids[i]) * a.dim, a.dim, a.out + i * a.dim);
  });
  return Status::Ok();
}

Status HostEmbeddingBackward(const EmbeddingArgs& a) {
  STRATA_RETURN_IF_ERROR(CheckIds(a.ids, a.n, a.vocab, "embedding_backward"));
  // Columns are split across threads; each thread adds the tokens in order, so equal ids never
  // race and the sum order is fixed.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (a.dim + kCols - 1) / kCols;
  ParallelFor(0, blocks, [&](int64_t blk) {
    const int64_t c0 = blk * kCols;
    const int64_t nc = std::min(kCols, a.dim - c0);
    for (int64_t i = 0; i < a.n; ++i) {
      AccumulateFromFloat(a.dtable, a.dtype, static_cast<int64_t>(a.ids[i]) * a.dim + c0, nc,
                          a.dout + i * a.dim + c0);
    }
  });
  return Status::Ok();
}

Status HostRmsNormForward(const RmsNormArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.dim));
  LoadAsFloat(a.w, a.w_dtype, 0, a.dim, w.data());
  ParallelFor(0, a.n, [&](int64_t i) {
    const float* x = a.x + i * a.dim;
    const float ms = SumSquares(x, a.dim) / static_cast<float>(a.dim);
    const float r = 1.0f / std::sqrt(ms + a.eps);
    a.rstd[i] = r;
    ScaleMul(x, w.data(), r, a.dim, a.y + i * a.dim);
  });
  return Status::Ok();
}

Status HostRmsNormBackward(const RmsNormArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.dim));
  LoadAsFloat(a.w, a.w_dtype, 0, a.dim, w.data());
  const int64_t blocks = (a.n + kRowBlock - 1) / kRowBlock;
  std::vector<float> partial;
  if (a.dw != nullptr) partial.assign(static_cast<size_t>(blocks * a.dim), 0.0f);
  ParallelFor(0, blocks, [&](int64_t blk) {
    float* pdw = a.dw != nullptr ? partial.data() + blk * a.dim : nullptr;
    const int64_t end = std::min(a.n, (blk + 1) * kRowBlock);
    for (int64_t i = blk * kRowBlock; i < end; ++i) {
      RmsBackwardRow(a.x + i * a.dim, w.data(), a.dy + i * a.dim, a.rstd[i], a.dim,
                     a.dx != nullptr ? a.dx + i * a.dim : nullptr, pdw);
    }
  });
  if (a.dw != nullptr) {
    for (int64_t blk = 1; blk < blocks; ++blk) {
      for (int64_t j = 0; j < a.dim; ++j)
        partial[static_cast<size_t>(j)] += partial[static_cast<size_t>(blk * a.dim + j)];
    }
    AccumulateFromFloat(a.dw, a.dw_dtype, 0, a.dim, partial.data());
  }
  return Status::Ok();
}

Status HostRope(const RopeArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    if (a.pos[i] < 0 || a.pos[i] >= a.max_pos) {
      return InvalidArgumentError("rope: position " + std::to_string(a.pos[i]) + " of token " +
                                  std::to_string(i) + " is outside [0, " +
                                  std::to_string(a.max_pos) + ")");
    }
  }
  const int64_t half = a.head_dim / 2;
  const float sign = a.inverse ? -1.0f : 1.0f;
  ParallelFor(0, a.n, [&](int64_t i) {
    const float* c = a.cos + static_cast<int64_t>(a.pos[i]) * half;
    const float* s = a.sin + static_cast<int64_t>(a.pos[i]) * half;
    for (int64_t h = 0; h < a.heads; ++h) {
      RotateRow(a.x + (i * a.heads + h) * a.head_dim, c, s, half, sign);
    }
  });
  return Status::Ok();
}

}  // namespace strata::nn::internal
