// cached_attention on the host backend against a plain double loop written here: grouped-query
// heads, each query at its own position attending to cache rows 0..pos of its sequence (rows
// above are garbage the op must not read), several query tokens per sequence (a prefill) and
// one (a decode step), and a sliding window (query at p reads rows p - window < j <= p only: the
// rows before the window hold garbage weighting the result if read), also rolling (position j in
// row j % cache_len, positions past cache_len); an out-of-range position fails the stream naming
// it. Tolerance 1e-5
// relative + 1e-5 absolute (fp32 against double).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/ops/ops.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using ::strata::testing::ExpectNear;
using ::strata::testing::IsOk;
using ::strata::testing::RandomVector;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct Shape {
  int64_t batch, q_len, cache_len, heads, kv_heads, dim;
  int64_t window = 0;  // 0: none
};

std::vector<double> Reference(const Shape& s, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<int32_t>& pos) {
  std::vector<double> out(q.size(), 0.0);
  const int64_t group = s.heads / s.kv_heads;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.q_len; ++t) {
      const int64_t r = b * s.q_len + t;
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = h / group;
        std::vector<double> w;
        double mx = -1e300, sum = 0;
        // Mistral's mask (transformers): key j is visible to query p when p - window < j <= p.
        const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos[r] - s.window + 1) : 0;
        for (int64_t j = first; j <= pos[r]; ++j) {
          double d = 0;
          for (int64_t x = 0; x < s.dim; ++x) {
            d += double(q[(r * s.heads + h) * s.dim + x]) *
                 k[((b * s.cache_len + j % s.cache_len) * s.kv_heads + g) * s.dim + x];
          }
          w.push_back(d / std::sqrt(double(s.dim)));
          mx = std::max(mx, w.back());
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t j = first; j <= pos[r]; ++j) {
          for (int64_t x = 0; x < s.dim; ++x) {
            out[(r * s.heads + h) * s.dim + x] +=
                w[j - first] / sum *
                v[((b * s.cache_len + j % s.cache_len) * s.kv_heads + g) * s.dim + x];
          }
        }
      }
    }
  }
  return out;
}

class CachedAttentionTest : public ::strata::testing::NnTest {
 protected:
  void Run(const Shape& s, const std::vector<int32_t>& pos, const char* what);
};

void CachedAttentionTest::Run(const Shape& s, const std::vector<int32_t>& pos, const char* what) {
  const size_t nq = s.batch * s.q_len * s.heads * s.dim;
  const size_t nkv = s.batch * s.cache_len * s.kv_heads * s.dim;
  const auto q = RandomVector(nq, 31), k = RandomVector(nkv, 32), v = RandomVector(nkv, 33);
  CachedAttentionArgs a;
  a.batch = s.batch, a.q_len = s.q_len, a.cache_len = s.cache_len;
  a.heads = s.heads, a.kv_heads = s.kv_heads, a.head_dim = s.dim, a.window = s.window;
  a.scale = static_cast<float>(1.0 / std::sqrt(double(s.dim)));
  a.q = Up(q), a.k_cache = Up(k), a.v_cache = Up(v), a.pos = Up(pos);
  a.out = Up(std::vector<float>(nq, 7.0f));
  ASSERT_THAT(CachedAttention(stream_, a), IsOk());
  ExpectNear(what, Down(a.out, nq), Reference(s, q, k, v, pos), 1e-5, 1e-5);
}

TEST_F(CachedAttentionTest, PrefillRowsAttendToTheirOwnPrefix) {
  // Two sequences of 5 query tokens at positions 0..4 in a cache of 9 rows, 4 heads on 2 kv heads.
  Run({2, 5, 9, 4, 2, 8}, {0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, "prefill");
}

TEST_F(CachedAttentionTest, DecodeStepsAttendToSequencesOfDifferentLengths) {
  Run({3, 1, 12, 6, 3, 4}, {11, 0, 6}, "decode");
}

TEST_F(CachedAttentionTest, ASlidingWindowReadsOnlyTheLastWindowRows) {
  // Window 3: a prefill of 7 tokens (rows 3..6 see 3 keys, rows 0..2 fewer) and decode steps at
  // positions inside (1, 2) and past the window (5, 10).
  Run({2, 7, 11, 4, 2, 8, 3}, {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6}, "windowed prefill");
  Run({4, 1, 11, 6, 3, 4, 3}, {10, 1, 2, 5}, "windowed decode");
  // A window of 1 attends to the query's own row only: out = v[p].
  Run({1, 1, 6, 2, 1, 4, 1}, {4}, "window 1");
}

TEST_F(CachedAttentionTest, ARollingCacheKeepsPositionJInRowJModuloItsLength) {
  // Window 3 in a rolling cache of 5 rows: a prefill chunk of 3 tokens at positions 6..8 (they
  // see positions 4..8: rows 4, 0, 1, 2, 3) and decode steps at positions past the cache (9, 13:
  // wrapped) and within it (2, 4).
  Run({2, 3, 5, 4, 2, 8, 3}, {6, 7, 8, 1, 2, 3}, "rolling prefill chunk");
  Run({4, 1, 5, 6, 3, 4, 3}, {9, 13, 2, 4}, "rolling decode");
}

TEST_F(CachedAttentionTest, APositionOutsideTheCacheFailsTheStreamNamingIt) {
  CachedAttentionArgs a;
  a.batch = 1, a.q_len = 1, a.cache_len = 4, a.heads = 2, a.kv_heads = 1, a.head_dim = 2;
  a.q = Up(std::vector<float>(4)), a.k_cache = Up(std::vector<float>(8));
  a.v_cache = Up(std::vector<float>(8)), a.pos = Up(std::vector<int32_t>{4});
  a.out = Up(std::vector<float>(4));
  ASSERT_THAT(CachedAttention(stream_, a), IsOk());
  EXPECT_THAT(stream_.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("position 4 of query 0")));
  auto s = device_->CreateStream();
  ASSERT_TRUE(s.ok());
  device_->DestroyStream(stream_).IgnoreError();
  stream_ = *s;
  a.kv_heads = 3;
  EXPECT_THAT(CachedAttention(stream_, a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("multiple of kv_heads")));
  a.kv_heads = 1, a.window = -1;
  EXPECT_THAT(CachedAttention(stream_, a),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("window (-1) must be in [0, cache_len = 4]")));
  a.window = 5;  // more than the cache holds
  EXPECT_THAT(CachedAttention(stream_, a),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("window (5) must be in [0, cache_len = 4]")));
}

}  // namespace
}  // namespace strata::nn
