// Every nn op on the host backend: forward against a plain double-precision reference written
// here, backward against central finite differences of that reference (in double), on small
// random shapes. Tolerances: forward 1e-5 relative (+1e-5 absolute), gradients 2e-3 relative
// (+2e-4 absolute) — fp32 kernels against a double oracle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/half.h"
#include "nn/ops/op_registry.h"
#include "nn/ops/ops.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using ::strata::testing::ExpectGradientMatchesFiniteDifferences;
using ::strata::testing::ExpectNear;
using ::strata::testing::IsOk;
using ::strata::testing::RandomVector;
using ::strata::testing::StatusIs;
using ::strata::testing::ToDouble;
using ::testing::HasSubstr;

class OpsTest : public ::strata::testing::NnTest {};

double Dot(const std::vector<double>& a, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * r[i];
  return s;
}

TEST_F(OpsTest, HostBackendSupportsEveryOp) {
  for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
    EXPECT_TRUE(SupportsOp(DeviceKind::kHost, static_cast<OpKind>(i)))
        << OpKindName(static_cast<OpKind>(i));
  }
}

TEST_F(OpsTest, GemmMatchesReferenceForEveryTransposeAndBatch) {
  const int64_t m = 5, n = 7, k = 6, batch = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      auto a = RandomVector(batch * m * k, 1), b = RandomVector(batch * k * n, 2);
      auto c0 = RandomVector(batch * m * n, 3);
      GemmArgs g;
      g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
      g.a = Up(a), g.lda = ta ? m : k;
      g.b = Up(b), g.ldb = tb ? k : n;
      float* c = Up(c0);
      g.c = c, g.ldc = n;
      g.alpha = 0.5f, g.beta = 2.0f;
      g.batch = batch, g.stride_a = m * k, g.stride_b = k * n, g.stride_c = m * n;
      ASSERT_THAT(Gemm(stream_, g), IsOk());
      std::vector<double> want(c0.size());
      for (int64_t p = 0; p < batch; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t l = 0; l < k; ++l) {
              const double av = a[p * m * k + (ta ? l * m + i : i * k + l)];
              const double bv = b[p * k * n + (tb ? j * k + l : l * n + j)];
              s += av * bv;
            }
            want[p * m * n + i * n + j] = 0.5 * s + 2.0 * c0[p * m * n + i * n + j];
          }
        }
      }
      ExpectNear("gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), Down(c, c0.size()),
                 want, 1e-5, 1e-5);
    }
  }
}

TEST_F(OpsTest, GemmConvertsBf16OperandsAndAccumulatesIntoBf16) {
  const int64_t m = 4, n = 3, k = 8;
  auto a = RandomVector(m * k, 4), bf = RandomVector(k * n, 5);
  std::vector<uint16_t> b16(bf.size()), c16(m * n);
  for (size_t i = 0; i < bf.size(); ++i) b16[i] = FloatToBf16(bf[i]);
  for (size_t i = 0; i < c16.size(); ++i) c16[i] = FloatToBf16(0.25f * static_cast<float>(i));
  GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = Up(a), g.lda = k;
  g.b = Up(b16), g.b_dtype = DType::kBFloat16, g.ldb = n;
  uint16_t* c = Up(c16);
  g.c = c, g.c_dtype = DType::kBFloat16, g.ldc = n, g.beta = 1.0f;
  ASSERT_THAT(Gemm(stream_, g), IsOk());
  auto got16 = Down(c, c16.size());
  std::vector<float> got(got16.size());
  std::vector<double> want(got16.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = Bf16ToFloat(c16[i * n + j]);
      for (int64_t l = 0; l < k; ++l) s += double(a[i * k + l]) * Bf16ToFloat(b16[l * n + j]);
      want[i * n + j] = s;
      got[i * n + j] = Bf16ToFloat(got16[i * n + j]);
    }
  }
  ExpectNear("bf16 gemm", got, want, 1e-6, 1.0 / 128);  // one bf16 rounding: 2^-8 relative
  g.beta = 0.5f;
  EXPECT_THAT(Gemm(stream_, g), StatusIs(StatusCode::kInvalidArgument, HasSubstr("beta = 1")));
}

TEST_F(OpsTest, EmbeddingGathersRowsAndScatterAddsRepeatedIds) {
  const int64_t vocab = 6, dim = 5, n = 7;
  std::vector<int32_t> ids = {1, 3, 1, 0, 5, 3, 1};
  auto table = RandomVector(vocab * dim, 6), dout = RandomVector(n * dim, 7);
  const int32_t* d_ids = Up(ids);
  float* out = Up(std::vector<float>(n * dim));
  ASSERT_THAT(EmbeddingForward(stream_, d_ids, n, Up(table), DType::kFloat32, vocab, dim, out),
              IsOk());
  std::vector<double> want(n * dim);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) want[i * dim + j] = table[ids[i] * dim + j];
  ExpectNear("embedding", Down(out, want.size()), want, 0, 0);
  // Backward: the gradient of sum(out * dout) w.r.t. the table, by finite differences.
  auto grad0 = RandomVector(vocab * dim, 8);
  float* dtable = Up(grad0);
  ASSERT_THAT(EmbeddingBackward(stream_, d_ids, n, Up(dout), dtable, DType::kFloat32, vocab, dim),
              IsOk());
  auto got = Down(dtable, grad0.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] -= grad0[i];  // accumulated on top
  auto loss = [&](const std::vector<double>& t) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < dim; ++j) s += t[ids[i] * dim + j] * dout[i * dim + j];
    return s;
  };
  ExpectGradientMatchesFiniteDifferences("d table", ToDouble(table), loss, got);
}

TEST_F(OpsTest, EmbeddingOutOfRangeIdFailsTheStreamNamingIt) {
  std::vector<int32_t> ids = {0, 9};
  float* out = Up(std::vector<float>(8));
  ASSERT_THAT(
      EmbeddingForward(stream_, Up(ids), 2, Up(std::vector<float>(16)), DType::kFloat32, 4, 4, out),
      IsOk());
  EXPECT_THAT(stream_.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("token id 9 at position 1")));
  auto s = device_->CreateStream();  // the failed stream stays failed; continue on a new one
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(device_->DestroyStream(stream_),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("token id 9")));
  stream_ = *s;
}

std::vector<double> RmsNormRef(const std::vector<double>& x, const std::vector<double>& w,
                               int64_t n, int64_t dim, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < dim; ++j) ms += x[i * dim + j] * x[i * dim + j];
    const double r = 1.0 / std::sqrt(ms / dim + eps);
    for (int64_t j = 0; j < dim; ++j) y[i * dim + j] = x[i * dim + j] * r * w[j];
  }
  return y;
}

TEST_F(OpsTest, RmsNormForwardAndBackwardMatchReference) {
  const int64_t n = 70, dim = 12;  // more rows than one reduction block
  const float eps = 1e-5f;
  auto x = RandomVector(n * dim, 9), w = RandomVector(dim, 10), r = RandomVector(n * dim, 11);
  for (float& v : w) v += 1.0f;
  float* d_x = Up(x);
  float* d_w = Up(w);
  float* y = Up(std::vector<float>(n * dim));
  float* rstd = Up(std::vector<float>(n));
  ASSERT_THAT(RmsNormForward(stream_, d_x, d_w, DType::kFloat32, n, dim, eps, y, rstd), IsOk());
  ExpectNear("rmsnorm y", Down(y, n * dim), RmsNormRef(ToDouble(x), ToDouble(w), n, dim, eps), 1e-5,
             1e-5);
  float* dx = Up(std::vector<float>(n * dim, 7.0f));  // overwritten
  auto dw0 = RandomVector(dim, 12);
  float* dw = Up(dw0);
  ASSERT_THAT(RmsNormBackward(stream_, d_x, d_w, DType::kFloat32, rstd, Up(r), n, dim, dx, dw,
                              DType::kFloat32),
              IsOk());
  const auto xd = ToDouble(x), wd = ToDouble(w);
  ExpectGradientMatchesFiniteDifferences(
      "d x", xd,
      [&](const std::vector<double>& v) { return Dot(RmsNormRef(v, wd, n, dim, eps), r); },
      Down(dx, n * dim));
  auto got_dw = Down(dw, dim);
  for (int64_t j = 0; j < dim; ++j) got_dw[j] -= dw0[j];
  ExpectGradientMatchesFiniteDifferences(
      "d w", wd,
      [&](const std::vector<double>& v) { return Dot(RmsNormRef(xd, v, n, dim, eps), r); }, got_dw);
}

// Hugging Face rotate-half with the tables given.
std::vector<double> RopeRef(std::vector<double> x, int64_t n, int64_t heads, int64_t d,
                            const std::vector<float>& cos, const std::vector<float>& sin,
                            const std::vector<int32_t>& pos) {
  const int64_t half = d / 2;
  std::vector<double> out = x;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t base = (i * heads + h) * d;
        const double c = cos[pos[i] * half + j % half], s = sin[pos[i] * half + j % half];
        const double rot = j < half ? -x[base + j + half] : x[base + j - half];
        out[base + j] = x[base + j] * c + rot * s;
      }
  return out;
}

TEST_F(OpsTest, RopeRotatesHalvesAndItsInverseIsTheBackward) {
  const int64_t n = 6, heads = 3, d = 8, half = d / 2, max_pos = 10;
  std::vector<float> cos(max_pos * half), sin(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t j = 0; j < half; ++j) {
      const double angle = p / std::pow(10000.0, 2.0 * j / d);
      cos[p * half + j] = static_cast<float>(std::cos(angle));
      sin[p * half + j] = static_cast<float>(std::sin(angle));
    }
  std::vector<int32_t> pos = {0, 1, 2, 7, 3, 9};
  auto x = RandomVector(n * heads * d, 13), r = RandomVector(n * heads * d, 14);
  float* d_x = Up(x);
  const float* c = Up(cos);
  const float* s = Up(sin);
  const int32_t* p = Up(pos);
  ASSERT_THAT(Rope(stream_, d_x, n, heads, d, c, s, p, max_pos, false), IsOk());
  ExpectNear("rope", Down(d_x, x.size()), RopeRef(ToDouble(x), n, heads, d, cos, sin, pos), 1e-6,
             1e-5);
  float* dy = Up(r);
  ASSERT_THAT(Rope(stream_, dy, n, heads, d, c, s, p, max_pos, true), IsOk());
  ExpectGradientMatchesFiniteDifferences(
      "d x", ToDouble(x),
      [&](const std::vector<double>& v) { return Dot(RopeRef(v, n, heads, d, cos, sin, pos), r); },
      Down(dy, r.size()));
  std::vector<int32_t> bad = {0, 10};
  ASSERT_THAT(Rope(stream_, d_x, 2, heads, d, c, s, Up(bad), max_pos, false), IsOk());
  EXPECT_THAT(stream_.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("position 10 of token 1")));
}

struct AttnShape {
  int64_t b, t, h, kvh, d;
};

std::vector<double> AttentionRef(const AttnShape& s, const std::vector<double>& q,
                                 const std::vector<double>& k, const std::vector<double>& v) {
  std::vector<double> out(s.b * s.t * s.h * s.d, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.d));
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      const int64_t g = h / (s.h / s.kvh);
      for (int64_t i = 0; i < s.t; ++i) {
        std::vector<double> w(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.d; ++e)
            dot +=
                q[((b * s.t + i) * s.h + h) * s.d + e] * k[((b * s.t + j) * s.kvh + g) * s.d + e];
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < s.d; ++e)
            out[((b * s.t + i) * s.h + h) * s.d + e] +=
                w[j] / sum * v[((b * s.t + j) * s.kvh + g) * s.d + e];
      }
    }
  return out;
}

TEST_F(OpsTest, CausalGroupedQueryAttentionMatchesReference) {
  const AttnShape s{2, 5, 4, 2, 4};
  const size_t nq = s.b * s.t * s.h * s.d, nkv = s.b * s.t * s.kvh * s.d;
  auto q = RandomVector(nq, 15), k = RandomVector(nkv, 16), v = RandomVector(nkv, 17);
  auto r = RandomVector(nq, 18);
  AttentionArgs a;
  a.batch = s.b, a.seq = s.t, a.heads = s.h, a.kv_heads = s.kvh, a.head_dim = s.d;
  a.scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
  a.q = Up(q), a.k = Up(k), a.v = Up(v);
  a.probs = Up(std::vector<float>(s.b * s.h * s.t * s.t));
  a.out = Up(std::vector<float>(nq));
  ASSERT_THAT(AttentionForward(stream_, a), IsOk());
  const auto qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v);
  ExpectNear("attention", Down(a.out, nq), AttentionRef(s, qd, kd, vd), 1e-5, 1e-5);
  a.dout = Up(r);
  a.dq = Up(std::vector<float>(nq, 3.0f));
  a.dk = Up(std::vector<float>(nkv, 3.0f));
  a.dv = Up(std::vector<float>(nkv, 3.0f));
  a.scratch = Up(std::vector<float>(s.t * s.t));
  ASSERT_THAT(AttentionBackward(stream_, a), IsOk());
  ExpectGradientMatchesFiniteDifferences(
      "d q", qd, [&](const std::vector<double>& x) { return Dot(AttentionRef(s, x, kd, vd), r); },
      Down(a.dq, nq));
  ExpectGradientMatchesFiniteDifferences(
      "d k", kd, [&](const std::vector<double>& x) { return Dot(AttentionRef(s, qd, x, vd), r); },
      Down(a.dk, nkv));
  ExpectGradientMatchesFiniteDifferences(
      "d v", vd, [&](const std::vector<double>& x) { return Dot(AttentionRef(s, qd, kd, x), r); },
      Down(a.dv, nkv));
  a.kv_heads = 3;
  EXPECT_THAT(AttentionForward(stream_, a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("multiple of kv_heads")));
}

std::vector<double> SwiGluRef(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> h(g.size());
  for (size_t i = 0; i < g.size(); ++i) h[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return h;
}

TEST_F(OpsTest, SwiGluForwardAndBackwardMatchReference) {
  const int64_t n = 40000;  // more than one parallel chunk
  auto g = RandomVector(n, 19, 3.0f), u = RandomVector(n, 20), r = RandomVector(n, 21);
  float* d_g = Up(g);
  float* d_u = Up(u);
  float* h = Up(std::vector<float>(n));
  ASSERT_THAT(SwiGluForward(stream_, d_g, d_u, n, h), IsOk());
  const auto gd = ToDouble(g), ud = ToDouble(u);
  ExpectNear("swiglu", Down(h, n), SwiGluRef(gd, ud), 1e-6, 1e-5);
  float* dg = Up(std::vector<float>(n));
  float* du = Up(std::vector<float>(n));
  ASSERT_THAT(SwiGluBackward(stream_, d_g, d_u, Up(r), n, dg, du), IsOk());
  // Finite differences element-wise (the op is element-wise): check a prefix of 2000.
  const size_t m = 2000;
  std::vector<double> gs(gd.begin(), gd.begin() + m), us(ud.begin(), ud.begin() + m);
  std::vector<float> rs(r.begin(), r.begin() + m);
  auto dgv = Down(dg, n), duv = Down(du, n);
  ExpectGradientMatchesFiniteDifferences(
      "d gate", gs, [&](const std::vector<double>& x) { return Dot(SwiGluRef(x, us), rs); },
      std::vector<float>(dgv.begin(), dgv.begin() + m));
  ExpectGradientMatchesFiniteDifferences(
      "d up", us, [&](const std::vector<double>& x) { return Dot(SwiGluRef(gs, x), rs); },
      std::vector<float>(duv.begin(), duv.begin() + m));
}

double CrossEntropyRef(const std::vector<double>& logits, const std::vector<int32_t>& labels,
                       int64_t b, int64_t t, int64_t vocab) {
  double sum = 0;
  int64_t count = 0;
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i + 1 < t; ++i) {
      const int32_t y = labels[s * t + i + 1];
      if (y == kIgnoreIndex) continue;
      const double* row = logits.data() + (s * t + i) * vocab;
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, row[j]);
      for (int64_t j = 0; j < vocab; ++j) z += std::exp(row[j] - mx);
      sum += mx + std::log(z) - row[y];
      ++count;
    }
  return count > 0 ? sum / count : 0.0;
}

TEST_F(OpsTest, CrossEntropyOverShiftedLabelsIgnoresMinus100) {
  const int64_t b = 2, t = 4, vocab = 11;
  auto logits = RandomVector(b * t * vocab, 22, 2.0f);
  std::vector<int32_t> labels = {5, 3, -100, 10, 0, 0, 7, -100};  // 4 scored: 3, 10, 0, 7
  CrossEntropyArgs a;
  a.batch = b, a.seq = t, a.vocab = vocab;
  a.logits = Up(logits);
  a.labels = Up(labels);
  a.num_valid = 4;
  a.lse = Up(std::vector<float>(b * t));
  a.loss = Up(std::vector<float>(1));
  a.loss_scale = 3.0f;
  ASSERT_THAT(CrossEntropyForward(stream_, a), IsOk());
  const auto ld = ToDouble(logits);
  ExpectNear("loss", Down(a.loss, 1), {CrossEntropyRef(ld, labels, b, t, vocab)}, 1e-6, 1e-6);
  ASSERT_THAT(CrossEntropyBackward(stream_, a), IsOk());
  ExpectGradientMatchesFiniteDifferences(
      "d logits", ld,
      [&](const std::vector<double>& x) { return 3.0 * CrossEntropyRef(x, labels, b, t, vocab); },
      Down(a.logits, logits.size()));
  labels[2] = 11;
  a.labels = Up(labels);
  ASSERT_THAT(CrossEntropyForward(stream_, a), IsOk());
  EXPECT_THAT(stream_.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("label 11 at position 2")));
}

TEST_F(OpsTest, ArgumentErrorsNameTheOpAndTheArgument) {
  EXPECT_THAT(
      RmsNormForward(stream_, nullptr, nullptr, DType::kFloat32, 1, 4, 1e-5f, nullptr, nullptr),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("rms_norm_forward: x is null")));
  float* x = Up(std::vector<float>(6));
  EXPECT_THAT(Rope(stream_, x, 1, 1, 3, x, x, reinterpret_cast<const int32_t*>(x), 1, false),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("head_dim must be even")));
  EXPECT_THAT(SwiGluForward(Stream(), x, x, 1, x),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("empty stream")));
}

}  // namespace
}  // namespace strata::nn
