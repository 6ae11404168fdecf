// Host attention against a KV cache (inference). One task per (sequence, head, query token): the
// scores of the query against positions first..pos (first = 0, or pos - window + 1 with a
// sliding window, whose rolling cache keeps position j in row j % cache_len), a softmax, and the
// weighted sum of the value rows. Decoding reads each cache row once per query head; the work is
// a small fraction of a step's GEMMs (2 * heads * head_dim * length flops per token against the
// weights' 2 * params).
#include <algorithm>
#include <string>
#include <vector>

#include "nn/host/host_ops.h"
#include "nn/host/simd.h"

namespace strata::nn::internal {
namespace {

STRATA_NN_SIMD float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

STRATA_NN_SIMD void Axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

Status HostCachedAttention(const CachedAttentionArgs& a) {
  const int64_t rows = a.batch * a.q_len;
  for (int64_t r = 0; r < rows; ++r) {
    if (a.pos[r] < 0 || (a.window == 0 && a.pos[r] >= a.cache_len)) {
      return InvalidArgumentError("cached_attention: position " + std::to_string(a.pos[r]) +
                                  " of query " + std::to_string(r) + " is outside the cache [0, " +
                                  std::to_string(a.cache_len) + ")");
    }
  }
  const int64_t D = a.head_dim, group = a.heads / a.kv_heads;
  const int64_t q_ld = a.heads * D, kv_ld = a.kv_heads * D;
  ParallelFor(0, rows * a.heads, [&](int64_t task) {
    const int64_t r = task / a.heads, h = task % a.heads, b = r / a.q_len;
    const int64_t p = a.pos[r];
    const int64_t first = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
    const int64_t len = p + 1 - first;  // positions first..p
    // Position first + j is in row (first + j) % cache_len: rows row0.. up to the cache's end,
    // then (a rolling cache that wrapped) from row 0.
    const int64_t row0 = first % a.cache_len, wrap = a.cache_len - row0;
    const float* q = a.q + r * q_ld + h * D;
    const float* k = a.k_cache + b * a.cache_len * kv_ld + (h / group) * D;
    const float* v = a.v_cache + b * a.cache_len * kv_ld + (h / group) * D;
    const auto row = [&](int64_t j) { return (j < wrap ? row0 + j : j - wrap) * kv_ld; };
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(len)) scores.resize(static_cast<size_t>(len));
    float mx = -3.0e38f;
    for (int64_t j = 0; j < len; ++j) {
      const float s = Dot(q, k + row(j), D) * a.scale;
      scores[static_cast<size_t>(j)] = s;
      mx = s > mx ? s : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) {
      const float e = FastExp(scores[static_cast<size_t>(j)] - mx);
      scores[static_cast<size_t>(j)] = e;
      sum += e;
    }
    float* out = a.out + r * q_ld + h * D;
    for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < len; ++j)
      Axpy(scores[static_cast<size_t>(j)] * inv, v + row(j), out, D);
  });
  return Status::Ok();
}

}  // namespace strata::nn::internal
