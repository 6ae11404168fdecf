// Op conformance: every nn op, forward and backward, on every device kind this build has
// (parameters `host`, `cuda`), against the host backend on the same random inputs. The host
// backend is itself checked against double-precision references in ops_test.cc; here it is the
// oracle, as the CPU backend is in ggml's test-backend-ops. The `cuda` cases skip with
// "no CUDA device: <why>" when there is no GPU or no CUDA build — never pass vacuously; the
// `host` cases run the same harness host-vs-host and require bit-identical results (so a harness
// bug — an output lost, a buffer read before its copy landed — shows up there too).
//
// Tolerances (|got - want| <= atol + rtol * |want|), for a GPU against OpenBLAS / oneTBB:
//   GEMM and attention (fp32 compute, other summation order)  atol 1e-4, rtol 1e-4
//   GEMM into a 16-bit C (one rounding, may land one ulp off)  atol 1e-3, rtol 8e-3 (fp16: 2e-3)
//   embedding forward / backward (same order, same rounding)  exact
//   RMSNorm, RoPE, SwiGLU, cross-entropy (expf vs the host's 2e-7 FastExp, reduction order)
//                                                               atol 1e-5, rtol 1e-5
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "nn/ops/op_registry.h"
#include "nn/ops/ops.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"

namespace strata {
// Prints the parameter as "host" / "cuda" in gtest messages.
static void PrintTo(DeviceKind kind, std::ostream* os) { *os << DeviceKindName(kind); }
}  // namespace strata

namespace strata::nn {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct Tol {
  double atol, rtol;
};
constexpr Tol kGemm{1e-4, 1e-4};
constexpr Tol kGemmBf16C{1e-3, 8e-3};
constexpr Tol kGemmFp16C{1e-3, 2e-3};
constexpr Tol kExact{0, 0};
constexpr Tol kElementwise{1e-5, 1e-5};
constexpr Tol kAttention{1e-4, 1e-4};

// got vs want within tol; NaN only where want is NaN.
::testing::AssertionResult Conforms(const std::string& what, const std::vector<float>& got,
                                    const std::vector<float>& want, Tol tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values vs " << want.size() << " from the host";
  }
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = std::isnan(w)
                        ? std::isnan(g)
                        : !std::isnan(g) && std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w);
    if (!ok) {
      if (bad++ == 0) first = i;
      worst = std::max(worst, std::abs(g - w));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " values off (first [" << first
         << "]: " << got[first] << " vs host " << want[first] << "; worst |diff| " << worst
         << "; atol " << tol.atol << ", rtol " << tol.rtol << ")";
}

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

std::vector<int32_t> RandomIds(size_t n, int32_t limit, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int32_t> d(0, limit - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = d(g);
  return v;
}

std::vector<uint16_t> To16(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = t == DType::kBFloat16 ? FloatToBf16(v[i]) : FloatToFp16(v[i]);
  }
  return out;
}

std::vector<float> From16(const std::vector<uint16_t>& v, DType t) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = t == DType::kBFloat16 ? Bf16ToFloat(v[i]) : Fp16ToFloat(v[i]);
  }
  return out;
}

// A device with one stream, and test data moved in and out of it.
class Runner {
 public:
  static Result<std::unique_ptr<Runner>> Create(DeviceKind kind) {
    DeviceOptions o;
    o.kind = kind;
    o.host.memory_bytes = size_t{64} << 20;
    o.host.populate_memory = false;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateDevice(o));
    STRATA_ASSIGN_OR_RETURN(Stream stream, device->CreateStream());
    auto r = std::unique_ptr<Runner>(new Runner());
    r->device_ = std::move(device);
    r->stream = stream;
    return r;
  }
  ~Runner() {
    stream.Synchronize().IgnoreError();  // error tests leave the stream failed on purpose
    for (void* p : allocs_) EXPECT_THAT(device_->Free(p), IsOk());
  }

  template <typename T>
  T* Up(const std::vector<T>& v) {
    Result<void*> p = device_->Allocate(std::max<size_t>(4, v.size() * sizeof(T)));
    EXPECT_THAT(p, IsOk());
    if (!p.ok()) return nullptr;
    allocs_.push_back(*p);
    EXPECT_THAT(stream.CopyAsync(*p, v.data(), v.size() * sizeof(T), CopyKind::kHostToDevice),
                IsOk());
    EXPECT_THAT(stream.Synchronize(), IsOk());  // `v` may be a temporary
    return static_cast<T*>(*p);
  }
  template <typename T>
  std::vector<T> Down(const T* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_THAT(stream.CopyAsync(v.data(), p, n * sizeof(T), CopyKind::kDeviceToHost), IsOk());
    EXPECT_THAT(stream.Synchronize(), IsOk());
    return v;
  }

  Stream stream;

 private:
  Runner() = default;
  std::unique_ptr<Device> device_;
  std::vector<void*> allocs_;
};

std::string ParamName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return DeviceKindName(info.param);
}

class OpConformanceTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    auto ref = Runner::Create(DeviceKind::kHost);
    ASSERT_THAT(ref, IsOk());
    ref_ = std::move(ref).value();
    if (GetParam() == DeviceKind::kCuda && !DeviceKindBuilt(DeviceKind::kCuda)) {
      GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (STRATA_WITH_CUDA off)";
    }
    auto dut = Runner::Create(GetParam());
    // Only "no device" skips; any other failure to set up a GPU is a test failure.
    if (GetParam() == DeviceKind::kCuda && dut.status().code() == StatusCode::kUnavailable) {
      std::string why = dut.status().message();
      const std::string prefix = "no CUDA device: ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      GTEST_SKIP() << prefix << why;
    }
    ASSERT_THAT(dut, IsOk());
    dut_ = std::move(dut).value();
  }

  // Runs `op` (a callable on a Runner returning named outputs) on the device under test and on
  // the host reference, and compares every output.
  template <typename Op>
  void ExpectConforms(const std::string& what, Op op, Tol tol) {
    // Host against host must be bit-identical (the host kernels do not depend on thread count).
    if (GetParam() == DeviceKind::kHost) tol = kExact;
    const std::vector<std::vector<float>> want = op(*ref_);
    const std::vector<std::vector<float>> got = op(*dut_);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(Conforms(what + " output " + std::to_string(i), got[i], want[i], tol));
    }
  }

  std::unique_ptr<Runner> ref_, dut_;
};

// --- GEMM ----------------------------------------------------------------------------------------

TEST_P(OpConformanceTest, GemmFp32EveryTransposeWithBatchAlphaBetaAndPaddedRows) {
  const int64_t m = 13, n = 9, k = 17, batch = 3, pad = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      const int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
      auto a = Random(batch * sa, 1), b = Random(batch * sb, 2), c0 = Random(batch * sc, 3);
      ExpectConforms(
          "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
          [&](Runner& r) {
            GemmArgs g;
            g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
            g.a = r.Up(a), g.lda = lda, g.b = r.Up(b), g.ldb = ldb;
            float* c = r.Up(c0);
            g.c = c, g.ldc = ldc, g.alpha = 0.5f, g.beta = 2.0f;
            g.batch = batch, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
            EXPECT_THAT(Gemm(r.stream, g), IsOk());
            return std::vector<std::vector<float>>{r.Down(c, c0.size())};
          },
          kGemm);
    }
  }
}

TEST_P(OpConformanceTest, Gemm16BitOperandsBothNativeMixedAndBroadcastGiveFp32) {
  const int64_t m = 11, n = 10, k = 24, batch = 2;
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    auto a = Random(batch * m * k, 4), b = Random(batch * n * k, 5);
    auto a16 = To16(a, t), b16 = To16(b, t);
    // Both 16-bit (tensor-core path on a GPU); fp32 x 16-bit, B^T, B shared by the batch (stride
    // 0: the Linear forward shape); 16-bit x fp32.
    for (int mode = 0; mode < 3; ++mode) {
      ExpectConforms(
          std::string(DTypeName(t)) + " mode " + std::to_string(mode),
          [&](Runner& r) {
            GemmArgs g;
            g.m = m, g.n = n, g.k = k, g.trans_b = true, g.batch = batch;
            g.a = mode == 1 ? static_cast<const void*>(r.Up(a)) : r.Up(a16);
            g.a_dtype = mode == 1 ? DType::kFloat32 : t, g.lda = k, g.stride_a = m * k;
            g.b = mode == 2 ? static_cast<const void*>(r.Up(b)) : r.Up(b16);
            g.b_dtype = mode == 2 ? DType::kFloat32 : t, g.ldb = k;
            g.stride_b = mode == 1 ? 0 : n * k;
            float* c = r.Up(std::vector<float>(batch * m * n, 0.0f));
            g.c = c, g.ldc = n, g.stride_c = m * n;
            EXPECT_THAT(Gemm(r.stream, g), IsOk());
            return std::vector<std::vector<float>>{r.Down(c, batch * m * n)};
          },
          kGemm);
    }
  }
}

TEST_P(OpConformanceTest, GemmAccumulatesIntoA16BitGradientRoundingOnce) {
  // The Linear weight gradient: dW[out, in] += dY^T X, dW in bf16 / fp16.
  const int64_t tokens = 19, in = 12, out = 7;
  auto dy = Random(tokens * out, 6), x = Random(tokens * in, 7), w0 = Random(out * in, 8);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    auto w16 = To16(w0, t);
    ExpectConforms(
        std::string("dW ") + std::string(DTypeName(t)),
        [&](Runner& r) {
          GemmArgs g;
          g.trans_a = true, g.m = out, g.n = in, g.k = tokens;
          g.a = r.Up(dy), g.lda = out, g.b = r.Up(x), g.ldb = in;
          uint16_t* c = r.Up(w16);
          g.c = c, g.c_dtype = t, g.ldc = in, g.beta = 1.0f;
          EXPECT_THAT(Gemm(r.stream, g), IsOk());
          return std::vector<std::vector<float>>{From16(r.Down(c, w16.size()), t)};
        },
        t == DType::kBFloat16 ? kGemmBf16C : kGemmFp16C);
  }
}

// --- Embedding -----------------------------------------------------------------------------------

TEST_P(OpConformanceTest, EmbeddingForwardGathersRowsOfEveryDtype) {
  const int64_t vocab = 37, dim = 300, n = 23;
  auto table = Random(vocab * dim, 9);
  auto ids = RandomIds(n, vocab, 10);
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    ExpectConforms(
        std::string("embedding forward ") + std::string(DTypeName(t)),
        [&](Runner& r) {
          const void* tab =
              t == DType::kFloat32 ? static_cast<const void*>(r.Up(table)) : r.Up(To16(table, t));
          float* out = r.Up(std::vector<float>(n * dim, -1.0f));
          EXPECT_THAT(EmbeddingForward(r.stream, r.Up(ids), n, tab, t, vocab, dim, out), IsOk());
          return std::vector<std::vector<float>>{r.Down(out, n * dim)};
        },
        kExact);
  }
}

TEST_P(OpConformanceTest, EmbeddingBackwardScatterAddsRepeatedIdsInTheHostOrder) {
  const int64_t vocab = 11, dim = 300, n = 40;  // 40 tokens over 11 ids: many repeats
  auto dout = Random(n * dim, 11), table0 = Random(vocab * dim, 12, 0.1f);
  auto ids = RandomIds(n, vocab, 13);
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    ExpectConforms(
        std::string("embedding backward ") + std::string(DTypeName(t)),
        [&](Runner& r) {
          const int32_t* d_ids = r.Up(ids);
          if (t == DType::kFloat32) {
            float* dt = r.Up(table0);
            EXPECT_THAT(EmbeddingBackward(r.stream, d_ids, n, r.Up(dout), dt, t, vocab, dim),
                        IsOk());
            return std::vector<std::vector<float>>{r.Down(dt, table0.size())};
          }
          uint16_t* dt = r.Up(To16(table0, t));
          EXPECT_THAT(EmbeddingBackward(r.stream, d_ids, n, r.Up(dout), dt, t, vocab, dim), IsOk());
          return std::vector<std::vector<float>>{From16(r.Down(dt, table0.size()), t)};
        },
        kExact);
  }
}

TEST_P(OpConformanceTest, EmbeddingFailsTheStreamNamingTheFirstBadId) {
  const std::vector<int32_t> ids = {1, 2, 50, 3, -4};
  auto table = Random(10 * 4, 14);
  float* out = dut_->Up(std::vector<float>(ids.size() * 4));
  ASSERT_THAT(EmbeddingForward(dut_->stream, dut_->Up(ids), 5, dut_->Up(table), DType::kFloat32, 10,
                               4, out),
              IsOk());  // enqueued; the ids are only seen when it runs
  EXPECT_THAT(
      dut_->stream.Synchronize(),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("embedding_forward: token id 50 at position 2 is outside [0, 10)")));
}

// --- RMSNorm -------------------------------------------------------------------------------------

TEST_P(OpConformanceTest, RmsNormForwardWithFp32AndBf16Weights) {
  const int64_t n = 9, dim = 515;
  auto x = Random(n * dim, 15, 2.0f), w = Random(dim, 16);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    ExpectConforms(
        std::string("rms_norm forward ") + std::string(DTypeName(t)),
        [&](Runner& r) {
          const void* dw =
              t == DType::kFloat32 ? static_cast<const void*>(r.Up(w)) : r.Up(To16(w, t));
          float* y = r.Up(std::vector<float>(n * dim));
          float* rstd = r.Up(std::vector<float>(n));
          EXPECT_THAT(RmsNormForward(r.stream, r.Up(x), dw, t, n, dim, 1e-5f, y, rstd), IsOk());
          return std::vector<std::vector<float>>{r.Down(y, n * dim), r.Down(rstd, n)};
        },
        kElementwise);
  }
}

TEST_P(OpConformanceTest, RmsNormBackwardGivesDxAndAccumulatesDwOfEveryDtype) {
  const int64_t n = 150, dim = 70;  // 150 rows: more than two row blocks of the dw reduction
  auto x = Random(n * dim, 17), w = Random(dim, 18), dy = Random(n * dim, 19);
  auto dw0 = Random(dim, 20, 0.1f);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (int want_dx = 0; want_dx < 2; ++want_dx) {
      ExpectConforms(
          std::string("rms_norm backward ") + std::string(DTypeName(t)) +
              (want_dx ? " dx+dw" : " dw only"),
          [&](Runner& r) {
            const float* dx_in = r.Up(x);
            float* y = r.Up(std::vector<float>(n * dim));
            float* rstd = r.Up(std::vector<float>(n));
            EXPECT_THAT(
                RmsNormForward(r.stream, dx_in, r.Up(w), DType::kFloat32, n, dim, 1e-6f, y, rstd),
                IsOk());
            float* dx = want_dx ? r.Up(std::vector<float>(n * dim)) : nullptr;
            std::vector<std::vector<float>> outs;
            if (t == DType::kFloat32) {
              float* dw = r.Up(dw0);
              EXPECT_THAT(RmsNormBackward(r.stream, dx_in, r.Up(w), DType::kFloat32, rstd, r.Up(dy),
                                          n, dim, dx, dw, t),
                          IsOk());
              outs.push_back(r.Down(dw, dim));
            } else {
              uint16_t* dw = r.Up(To16(dw0, t));
              EXPECT_THAT(RmsNormBackward(r.stream, dx_in, r.Up(w), DType::kFloat32, rstd, r.Up(dy),
                                          n, dim, dx, dw, t),
                          IsOk());
              outs.push_back(From16(r.Down(dw, dim), t));
            }
            if (want_dx) outs.push_back(r.Down(dx, n * dim));
            return outs;
          },
          t == DType::kFloat32 ? kElementwise : kGemmBf16C);
    }
  }
}

// --- RoPE ----------------------------------------------------------------------------------------

TEST_P(OpConformanceTest, RopeRotatesAndInverseRotatesBack) {
  const int64_t n = 14, heads = 3, head_dim = 16, half = 8, max_pos = 32;
  auto x = Random(n * heads * head_dim, 21);
  std::vector<float> cos(max_pos * half), sin(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = p * std::pow(10000.0, -2.0 * j / head_dim);
      cos[p * half + j] = static_cast<float>(std::cos(angle));
      sin[p * half + j] = static_cast<float>(std::sin(angle));
    }
  }
  auto pos = RandomIds(n, max_pos, 22);
  for (int inverse = 0; inverse < 2; ++inverse) {
    ExpectConforms(
        inverse ? "rope inverse" : "rope",
        [&](Runner& r) {
          float* dx = r.Up(x);
          EXPECT_THAT(Rope(r.stream, dx, n, heads, head_dim, r.Up(cos), r.Up(sin), r.Up(pos),
                           max_pos, inverse),
                      IsOk());
          return std::vector<std::vector<float>>{r.Down(dx, x.size())};
        },
        kElementwise);
  }
}

TEST_P(OpConformanceTest, RopeFailsTheStreamNamingABadPosition) {
  const std::vector<int32_t> pos = {0, 1, 9};
  auto table = Random(4 * 2, 23);
  float* x = dut_->Up(Random(3 * 4, 24));
  ASSERT_THAT(
      Rope(dut_->stream, x, 3, 1, 4, dut_->Up(table), dut_->Up(table), dut_->Up(pos), 4, false),
      IsOk());
  EXPECT_THAT(dut_->stream.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("rope: position 9 of token 2 is outside [0, 4)")));
}

// --- Attention -----------------------------------------------------------------------------------

struct AttnShape {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

std::vector<std::vector<float>> RunAttention(Runner& r, const AttnShape& s, bool backward) {
  const int64_t q_n = s.batch * s.seq * s.heads * s.head_dim;
  const int64_t kv_n = s.batch * s.seq * s.kv_heads * s.head_dim;
  const int64_t p_n = s.batch * s.heads * s.seq * s.seq;
  AttentionArgs a;
  a.batch = s.batch, a.seq = s.seq, a.heads = s.heads, a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim, a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.q = r.Up(Random(q_n, 25)), a.k = r.Up(Random(kv_n, 26)), a.v = r.Up(Random(kv_n, 27));
  a.probs = r.Up(std::vector<float>(p_n, -1.0f));
  a.out = r.Up(std::vector<float>(q_n));
  EXPECT_THAT(AttentionForward(r.stream, a), IsOk());
  if (!backward) return {r.Down(a.out, q_n), r.Down(a.probs, p_n)};
  a.dout = r.Up(Random(q_n, 28));
  a.dq = r.Up(std::vector<float>(q_n)), a.dk = r.Up(std::vector<float>(kv_n, 7.0f));
  a.dv = r.Up(std::vector<float>(kv_n, 7.0f));  // overwritten, not accumulated into
  a.scratch = r.Up(std::vector<float>(s.seq * s.seq));
  EXPECT_THAT(AttentionBackward(r.stream, a), IsOk());
  return {r.Down(a.dq, q_n), r.Down(a.dk, kv_n), r.Down(a.dv, kv_n)};
}

TEST_P(OpConformanceTest, AttentionForwardCausalWithGroupedAndFullHeads) {
  for (AttnShape s :
       {AttnShape{2, 9, 4, 2, 8}, AttnShape{1, 17, 3, 3, 16}, AttnShape{2, 5, 4, 1, 4}}) {
    ExpectConforms(
        "attention forward heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads),
        [&](Runner& r) { return RunAttention(r, s, false); }, kAttention);
  }
}

TEST_P(OpConformanceTest, AttentionBackwardCausalWithGroupedAndFullHeads) {
  for (AttnShape s :
       {AttnShape{2, 9, 4, 2, 8}, AttnShape{1, 17, 3, 3, 16}, AttnShape{2, 5, 4, 1, 4}}) {
    ExpectConforms(
        "attention backward heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads),
        [&](Runner& r) { return RunAttention(r, s, true); }, kAttention);
  }
}

// --- SwiGLU --------------------------------------------------------------------------------------

TEST_P(OpConformanceTest, SwiGluForwardAndInPlaceBackward) {
  const int64_t n = 5000;
  auto gate = Random(n, 29, 3.0f), up = Random(n, 30), dh = Random(n, 31);
  ExpectConforms(
      "swiglu",
      [&](Runner& r) {
        float* g = r.Up(gate);
        float* u = r.Up(up);
        float* h = r.Up(std::vector<float>(n));
        EXPECT_THAT(SwiGluForward(r.stream, g, u, n, h), IsOk());
        std::vector<float> hv = r.Down(h, n);
        EXPECT_THAT(SwiGluBackward(r.stream, g, u, r.Up(dh), n, g, u), IsOk());  // in place
        return std::vector<std::vector<float>>{hv, r.Down(g, n), r.Down(u, n)};
      },
      kElementwise);
}

// --- Cross-entropy -------------------------------------------------------------------------------

TEST_P(OpConformanceTest, CrossEntropyForwardAndBackwardSkipIgnoredAndLastTokens) {
  const int64_t batch = 3, seq = 6, vocab = 333, rows = batch * seq;
  auto logits = Random(rows * vocab, 32, 3.0f);
  auto labels = RandomIds(rows, vocab, 33);
  labels[2] = labels[9] = labels[10] = kIgnoreIndex;
  for (bool all_ignored : {false, true}) {
    std::vector<int32_t> lab = labels;
    if (all_ignored) std::fill(lab.begin(), lab.end(), kIgnoreIndex);
    int64_t valid = 0;
    for (int64_t r = 0; r < rows; ++r) valid += r % seq + 1 < seq && lab[r + 1] != kIgnoreIndex;
    ExpectConforms(
        all_ignored ? "cross_entropy all ignored" : "cross_entropy",
        [&](Runner& r) {
          CrossEntropyArgs a;
          a.batch = batch, a.seq = seq, a.vocab = vocab, a.num_valid = valid;
          a.logits = r.Up(logits), a.labels = r.Up(lab);
          a.lse = r.Up(std::vector<float>(rows, -5.0f));  // unscored rows stay -5 on both
          a.loss = r.Up(std::vector<float>{-1.0f});
          a.loss_scale = 64.0f;
          EXPECT_THAT(CrossEntropyForward(r.stream, a), IsOk());
          std::vector<float> loss = r.Down(a.loss, 1), lse = r.Down(a.lse, rows);
          EXPECT_THAT(CrossEntropyBackward(r.stream, a), IsOk());
          return std::vector<std::vector<float>>{loss, lse, r.Down(a.logits, rows * vocab)};
        },
        kElementwise);
  }
}

TEST_P(OpConformanceTest, CrossEntropyFailsTheStreamNamingABadLabel) {
  std::vector<int32_t> labels = {1, kIgnoreIndex, 2, 12, 0, -7};
  CrossEntropyArgs a;
  a.batch = 2, a.seq = 3, a.vocab = 10, a.num_valid = 2;
  a.logits = dut_->Up(Random(6 * 10, 34)), a.labels = dut_->Up(labels);
  a.lse = dut_->Up(std::vector<float>(6)), a.loss = dut_->Up(std::vector<float>(1));
  ASSERT_THAT(CrossEntropyForward(dut_->stream, a), IsOk());
  EXPECT_THAT(dut_->stream.Synchronize(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("label 12 at position 3 is outside [0, 10) and is not -100")));
}

INSTANTIATE_TEST_SUITE_P(Devices, OpConformanceTest,
                         ::testing::Values(DeviceKind::kHost, DeviceKind::kCuda), ParamName);

// --- The harness itself --------------------------------------------------------------------------

TEST(OpConformanceHarnessTest, FlagsValuesOutsideToleranceAndMismatchedNaN) {
  const std::vector<float> want = {1.0f, -2.0f, 3.0f};
  EXPECT_TRUE(Conforms("same", want, want, kExact));
  EXPECT_TRUE(Conforms("within", {1.00005f, -2.0f, 3.0f}, want, kGemm));
  EXPECT_FALSE(Conforms("outside", {1.001f, -2.0f, 3.0f}, want, kGemm));
  EXPECT_FALSE(Conforms("nan", {1.0f, NAN, 3.0f}, want, kGemm));
  EXPECT_FALSE(Conforms("short", {1.0f, -2.0f}, want, kGemm));
}

TEST(OpConformanceHarnessTest, EveryBuiltBackendImplementsEveryOp) {
  for (DeviceKind kind : BuiltDeviceKinds()) {
    const OpTable* table = OpTableFor(kind);
    ASSERT_NE(table, nullptr) << DeviceKindName(kind) << " is built but has no op table";
    EXPECT_STREQ(table->backend, DeviceKindName(kind));
    for (int i = 0; i < static_cast<int>(OpKind::kCount); ++i) {
      EXPECT_TRUE(SupportsOp(kind, static_cast<OpKind>(i)))
          << DeviceKindName(kind) << " lacks " << OpKindName(static_cast<OpKind>(i));
    }
  }
}

}  // namespace
}  // namespace strata::nn
