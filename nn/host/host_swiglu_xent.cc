// Host kernels for the SwiGLU activation and the fused softmax cross-entropy (forward keeps each
// row's log-sum-exp; backward overwrites the logits with their gradient). Vectorised loops over
// contiguous ranges, split over oneTBB; the loss sum is taken in a fixed order (per-row values
// summed in double), so it does not depend on thread count.
#include <cmath>
#include <string>
#include <vector>

#include "nn/host/host_ops.h"
#include "nn/host/simd.h"

namespace strata::nn::internal {
namespace {

constexpr int64_t kChunk = 16384;

STRATA_NN_SIMD void SwiGluFwd(const float* g, const float* u, int64_t n, float* h) {
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (1.0f + FastExp(-g[i])) * u[i];
}

STRATA_NN_SIMD void SwiGluBwd(const float* g, const float* u, const float* dh, int64_t n, float* dg,
                              float* du) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], dhi = dh[i];
    const float sig = 1.0f / (1.0f + FastExp(-gi));
    const float silu = gi * sig;
    dg[i] = dhi * ui * sig * (1.0f + gi * (1.0f - sig));
    du[i] = dhi * silu;
  }
}

STRATA_NN_SIMD float RowMax(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

STRATA_NN_SIMD float SumExp(const float* x, int64_t n, float mx) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += FastExp(x[j] - mx);
  return s;
}

STRATA_NN_SIMD void SoftmaxGrad(float* x, int64_t n, float lse, float scale) {
  for (int64_t j = 0; j < n; ++j) x[j] = FastExp(x[j] - lse) * scale;
}

// The label scored by row r, or -1 if the row scores nothing.
int64_t TargetOf(const CrossEntropyArgs& a, int64_t r) {
  if (a.labels_shifted) return a.labels[r] == kIgnoreIndex ? -1 : a.labels[r];
  const int64_t t = r % a.seq;
  if (t + 1 >= a.seq) return -1;
  const int32_t label = a.labels[r + 1];
  return label == kIgnoreIndex ? -1 : label;
}

template <typename Fn>
void ForChunks(int64_t n, Fn fn) {
  ParallelFor(0, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t b = c * kChunk;
    fn(b, std::min(kChunk, n - b));
  });
}

}  // namespace

Status HostSwiGluForward(const SwiGluArgs& a) {
  ForChunks(a.n, [&](int64_t b, int64_t len) { SwiGluFwd(a.gate + b, a.up + b, len, a.h + b); });
  return Status::Ok();
}

Status HostSwiGluBackward(const SwiGluArgs& a) {
  ForChunks(a.n, [&](int64_t b, int64_t len) {
    SwiGluBwd(a.gate + b, a.up + b, a.dh + b, len, a.dgate + b, a.dup + b);
  });
  return Status::Ok();
}

Status HostCrossEntropyForward(const CrossEntropyArgs& a) {
  const int64_t rows = a.batch * a.seq;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = a.labels[r];
    if (label != kIgnoreIndex && (label < 0 || label >= a.vocab)) {
      return InvalidArgumentError("cross_entropy: label " + std::to_string(label) +
                                  " at position " + std::to_string(r) + " is outside [0, " +
                                  std::to_string(a.vocab) + ") and is not -100");
    }
  }
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
  ParallelFor(0, rows, [&](int64_t r) {
    const int64_t target = TargetOf(a, r);
    if (target < 0) return;
    const float* x = a.logits + r * a.vocab;
    const float mx = RowMax(x, a.vocab);
    const float lse = mx + std::log(SumExp(x, a.vocab, mx));
    a.lse[r] = lse;
    row_loss[static_cast<size_t>(r)] = static_cast<double>(lse) - x[target];
  });
  double sum = 0.0;
  for (double v : row_loss) sum += v;
  const float loss =
      a.num_valid > 0 ? static_cast<float>(sum / static_cast<double>(a.num_valid)) : 0.0f;
  *a.loss = a.accumulate_loss ? *a.loss + loss : loss;
  return Status::Ok();
}

Status HostCrossEntropyBackward(const CrossEntropyArgs& a) {
  const int64_t rows = a.batch * a.seq;
  const float scale = a.num_valid > 0 ? a.loss_scale / static_cast<float>(a.num_valid) : 0.0f;
  ParallelFor(0, rows, [&](int64_t r) {
    float* x = a.logits + r * a.vocab;
    const int64_t target = TargetOf(a, r);
    if (target < 0) {
      std::fill(x, x + a.vocab, 0.0f);
      return;
    }
    SoftmaxGrad(x, a.vocab, a.lse[r], scale);
    x[target] -= scale;
  });
  return Status::Ok();
}

}  // namespace strata::nn::internal
