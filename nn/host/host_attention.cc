// Host causal attention with grouped-query heads. Per (batch, head): S = scale * Q K^T and the
// probability-weighted sum P V by OpenBLAS (strided views of the [B, T, H, D] activations, no
// transposes), the causal softmax row by row in vectorised loops split over rows with oneTBB
// between the BLAS calls. P is saved for the backward (llm.c's `att`).
//
// Backward per (b, h): dP = dO V^T; dS = P * (dP - rowsum(P * dP)) * scale; dQ = dS K;
// dK += dS^T Q and dV += P^T dO (heads of one kv group accumulate in turn, so no races).

#include <chrono>
#include <cstring>

#include "nn/host/host_ops.h"
#include "nn/host/simd.h"

namespace strata::nn::internal {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Ns(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Row i of a causal softmax whose keys start at `lo`: s[lo..i] -> probabilities, the rest -> 0.
STRATA_NN_SIMD void SoftmaxCausalRow(float* s, int64_t lo, int64_t i, int64_t t) {
  const int64_t len = i + 1;
  for (int64_t j = 0; j < lo; ++j) s[j] = 0.0f;
  float* r = s + lo;
  const int64_t n = len - lo;
  float mx = r[0];
  for (int64_t j = 1; j < n; ++j) mx = r[j] > mx ? r[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = FastExp(r[j] - mx);
    r[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) r[j] *= inv;
  for (int64_t j = len; j < t; ++j) s[j] = 0.0f;
}

// dS[i, :] = P[i, :] * (dP[i, :] - <P[i, :], dP[i, :]>) * scale, in place over dP.
STRATA_NN_SIMD void SoftmaxBackwardRow(const float* p, float* dp, int64_t len, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < len; ++j) dot += p[j] * dp[j];
  for (int64_t j = 0; j < len; ++j) dp[j] = p[j] * (dp[j] - dot) * scale;
}

struct Layout {
  int64_t T, H, KvH, D, group;
  int64_t q_ld, kv_ld;
  explicit Layout(const AttentionArgs& a)
      : T(a.seq),
        H(a.heads),
        KvH(a.kv_heads),
        D(a.head_dim),
        group(a.heads / a.kv_heads),
        q_ld(a.heads * a.head_dim),
        kv_ld(a.kv_heads * a.head_dim) {}
  int64_t q_off(int64_t b, int64_t h) const { return b * T * q_ld + h * D; }
  int64_t kv_off(int64_t b, int64_t h) const { return b * T * kv_ld + (h / group) * D; }
  int64_t p_off(int64_t b, int64_t h) const { return (b * H + h) * T * T; }
};

}  // namespace

Status HostAttentionForward(const AttentionArgs& a) {
  const Layout l(a);
  const int T = static_cast<int>(l.T), D = static_cast<int>(l.D);
  uint64_t gemm_ns = 0;
  const auto start = Clock::now();
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < l.H; ++h) {
      const float* q = a.q + l.q_off(b, h);
      const float* k = a.k + l.kv_off(b, h);
      const float* v = a.v + l.kv_off(b, h);
      float* p = a.probs + l.p_off(b, h);
      auto t0 = Clock::now();
      Sgemm(false, true, T, T, D, a.scale, q, l.q_ld, k, l.kv_ld, 0.0f, p, T);
      auto t1 = Clock::now();
      const int32_t* starts = a.row_start != nullptr ? a.row_start + b * l.T : nullptr;
      ParallelFor(0, l.T, [&](int64_t i) {
        SoftmaxCausalRow(p + i * l.T, starts != nullptr ? starts[i] : 0, i, l.T);
      });
      auto t2 = Clock::now();
      Sgemm(false, false, T, D, T, 1.0f, p, T, v, l.kv_ld, 0.0f, a.out + l.q_off(b, h), l.q_ld);
      gemm_ns += Ns(t0, t1) + Ns(t2, Clock::now());
    }
  }
  if (OpTimingEnabled()) {
    RecordOpTime(OpKind::kGemm, gemm_ns);
    RecordOpTime(OpKind::kAttentionForward, Ns(start, Clock::now()) - gemm_ns);
  }
  return Status::Ok();
}

Status HostAttentionBackward(const AttentionArgs& a) {
  const Layout l(a);
  const int T = static_cast<int>(l.T), D = static_cast<int>(l.D);
  const int q_ld = static_cast<int>(l.q_ld), kv_ld = static_cast<int>(l.kv_ld);
  uint64_t gemm_ns = 0;
  const auto start = Clock::now();
  const size_t kv_bytes = static_cast<size_t>(a.batch * l.T * l.kv_ld) * sizeof(float);
  std::memset(a.dk, 0, kv_bytes);
  std::memset(a.dv, 0, kv_bytes);
  float* ds = a.scratch;
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < l.H; ++h) {
      const float* q = a.q + l.q_off(b, h);
      const float* k = a.k + l.kv_off(b, h);
      const float* v = a.v + l.kv_off(b, h);
      const float* p = a.probs + l.p_off(b, h);
      const float* dout = a.dout + l.q_off(b, h);
      auto t0 = Clock::now();
      Sgemm(false, true, T, T, D, 1.0f, dout, q_ld, v, kv_ld, 0.0f, ds, T);
      Sgemm(true, false, T, D, T, 1.0f, p, T, dout, q_ld, 1.0f, a.dv + l.kv_off(b, h), kv_ld);
      auto t1 = Clock::now();
      // Probabilities left of a row's start are 0, so their dS is 0 without a case of its own.
      ParallelFor(0, l.T, [&](int64_t i) {
        SoftmaxBackwardRow(p + i * l.T, ds + i * l.T, i + 1, a.scale);
        for (int64_t j = i + 1; j < l.T; ++j) ds[i * l.T + j] = 0.0f;
      });
      auto t2 = Clock::now();
      Sgemm(false, false, T, D, T, 1.0f, ds, T, k, kv_ld, 0.0f, a.dq + l.q_off(b, h), q_ld);
      Sgemm(true, false, T, D, T, 1.0f, ds, T, q, q_ld, 1.0f, a.dk + l.kv_off(b, h), kv_ld);
      gemm_ns += Ns(t0, t1) + Ns(t2, Clock::now());
    }
  }
  if (OpTimingEnabled()) {
    RecordOpTime(OpKind::kGemm, gemm_ns);
    RecordOpTime(OpKind::kAttentionBackward, Ns(start, Clock::now()) - gemm_ns);
  }
  return Status::Ok();
}

}  // namespace strata::nn::internal
