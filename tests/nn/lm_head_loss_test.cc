// LmHeadLoss: the LM head + cross-entropy in chunks of tokens at Qwen's vocabulary (151,936) and
// a small hidden size. The loss and every gradient of the chunked path equal the whole path's
// (fp32 rounding) and a float64 double loop written here; the device memory the head holds is
// measured (the device's peak) and bounded by the chunk, not by tokens x vocab.
#include "nn/modules/lm/lm_head_loss.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "nn/ops/ops.h"
#include "offload/device/host/host_device.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using strata::testing::ExpectNear;
using strata::testing::RandomVector;
using strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 151936, kHidden = 16, kBatch = 2, kSeq = 24, kTokens = kBatch * kSeq;

struct Inputs {
  std::vector<float> w, x;
  std::vector<int32_t> targets;  // shifted: row r scores targets[r]
  int64_t num_valid = 0;
};

Inputs MakeInputs() {
  Inputs in;
  in.w = RandomVector(static_cast<size_t>(kVocab * kHidden), 11, 0.5f);
  in.x = RandomVector(static_cast<size_t>(kTokens * kHidden), 12, 1.0f);
  std::mt19937_64 g(13);
  in.targets.resize(static_cast<size_t>(kTokens));
  for (int64_t r = 0; r < kTokens; ++r) {
    int32_t t = static_cast<int32_t>(g() % kVocab);
    if (r % kSeq == kSeq - 1 || r % 7 == 3) t = kIgnoreIndex;  // last token, some ignored
    in.targets[static_cast<size_t>(r)] = t;
    if (t != kIgnoreIndex) ++in.num_valid;
  }
  return in;
}

struct Outputs {
  float loss = 0;
  std::vector<float> dx, dw;
  uint64_t head_peak_bytes = 0;  // device peak during the head minus what was in use before
};

// A fresh device per run, so its peak counter measures this run alone.
Outputs RunHead(const Inputs& in, int64_t chunk, float loss_scale = 1.0f) {
  Outputs out;
  HostDeviceOptions o;
  o.memory_bytes = size_t{256} << 20;
  o.populate_memory = false;
  auto device = CreateHostDevice(o);
  EXPECT_TRUE(device.ok());
  Device* d = device->get();
  Stream stream = *d->CreateStream();
  auto up = [&](const void* src, size_t bytes) {
    void* p = *d->Allocate(bytes);
    EXPECT_TRUE(stream.CopyAsync(p, src, bytes, CopyKind::kHostToDevice).ok());
    return p;
  };
  Linear head("lm_head", kHidden, kVocab, DType::kFloat32);
  void* w = up(in.w.data(), in.w.size() * 4);
  void* x = up(in.x.data(), in.x.size() * 4);
  void* t = up(in.targets.data(), in.targets.size() * 4);
  void* dw = *d->Allocate(in.w.size() * 4);
  void* dx = *d->Allocate(in.x.size() * 4);
  void* loss = *d->Allocate(4);
  head.weight().set_data(w);
  head.weight().set_grad(dw, DType::kFloat32, /*fresh=*/true);
  EXPECT_TRUE(stream.Synchronize().ok());
  const uint64_t before = d->MemoryStats().in_use_bytes;
  {
    LmHeadLoss hl(d, &head, chunk);
    const RunContext ctx{d, stream, true};
    const Tensor xt(x, DType::kFloat32, Shape{kTokens, kHidden});
    EXPECT_TRUE(
        hl.Forward(ctx, xt, static_cast<const int32_t*>(t), in.num_valid, static_cast<float*>(loss))
            .ok());
    EXPECT_TRUE(
        hl.Backward(ctx, loss_scale, Tensor(dx, DType::kFloat32, Shape{kTokens, kHidden})).ok());
    EXPECT_TRUE(stream.Synchronize().ok());
    out.head_peak_bytes = d->MemoryStats().peak_bytes - before;
  }
  out.dx.resize(in.x.size());
  out.dw.resize(in.w.size());
  EXPECT_TRUE(stream.CopyAsync(&out.loss, loss, 4, CopyKind::kDeviceToHost).ok());
  EXPECT_TRUE(stream.CopyAsync(out.dx.data(), dx, out.dx.size() * 4, CopyKind::kDeviceToHost).ok());
  EXPECT_TRUE(stream.CopyAsync(out.dw.data(), dw, out.dw.size() * 4, CopyKind::kDeviceToHost).ok());
  EXPECT_TRUE(stream.Synchronize().ok());
  EXPECT_TRUE(d->DestroyStream(stream).ok());
  return out;
}

// float64 double loop: logits = x W^T, loss = mean over scored rows of lse - logit[target],
// dlogits = (softmax - onehot) * scale / num_valid, dx = dlogits W, dW = dlogits^T x.
struct Reference {
  double loss = 0;
  std::vector<double> dx, dw;
};
Reference Reference64(const Inputs& in, double loss_scale) {
  Reference r;
  r.dx.assign(in.x.size(), 0.0);
  r.dw.assign(in.w.size(), 0.0);
  std::vector<double> z(static_cast<size_t>(kVocab));
  for (int64_t i = 0; i < kTokens; ++i) {
    const int32_t target = in.targets[static_cast<size_t>(i)];
    if (target == kIgnoreIndex) continue;
    const float* xi = &in.x[static_cast<size_t>(i * kHidden)];
    double mx = -1e300;
    for (int64_t v = 0; v < kVocab; ++v) {
      const float* wv = &in.w[static_cast<size_t>(v * kHidden)];
      double s = 0;
      for (int64_t k = 0; k < kHidden; ++k) s += static_cast<double>(xi[k]) * wv[k];
      z[static_cast<size_t>(v)] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (double zv : z) sum += std::exp(zv - mx);
    const double lse = mx + std::log(sum);
    r.loss += (lse - z[static_cast<size_t>(target)]) / static_cast<double>(in.num_valid);
    const double scale = loss_scale / static_cast<double>(in.num_valid);
    for (int64_t v = 0; v < kVocab; ++v) {
      const double g =
          (std::exp(z[static_cast<size_t>(v)] - lse) - (v == target ? 1.0 : 0.0)) * scale;
      const float* wv = &in.w[static_cast<size_t>(v * kHidden)];
      for (int64_t k = 0; k < kHidden; ++k) {
        r.dx[static_cast<size_t>(i * kHidden + k)] += g * wv[k];
        r.dw[static_cast<size_t>(v * kHidden + k)] += g * xi[k];
      }
    }
  }
  return r;
}

double RelativeL2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::vector<double> Widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(LmHeadLossTest, ChunkedLossAndGradientsEqualWholeAndFloat64AtVocab151936) {
  const Inputs in = MakeInputs();
  const Outputs whole = RunHead(in, 0, 2.0f);
  const Reference ref = Reference64(in, 2.0);
  // 7 rows per chunk: 48 tokens in 7 chunks, the last one short.
  for (int64_t chunk : {7, 16, 47}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Outputs c = RunHead(in, chunk, 2.0f);
    EXPECT_NEAR(c.loss, whole.loss, 2e-6 * std::abs(whole.loss));
    ExpectNear("dx vs whole", c.dx, Widen(whole.dx), 1e-7, 1e-5);
    ExpectNear("dW vs whole", c.dw, Widen(whole.dw), 1e-9, 1e-5);
  }
  // Against float64, norm-wise: fp32 logits, a 151,936-term log-sum-exp and dx's 151,936-term
  // reduction leave elementwise errors of ~1e-4 on entries that cancel; the relative L2 error
  // of each whole gradient is what fp32 keeps small.
  const Outputs c7 = RunHead(in, 7, 2.0f);
  for (const Outputs* o : {&whole, &c7}) {
    SCOPED_TRACE(o == &whole ? "whole" : "chunk 7");
    EXPECT_NEAR(o->loss, ref.loss, 1e-5 * std::abs(ref.loss));
    EXPECT_LT(RelativeL2(o->dx, ref.dx), 1e-4);  // sqrt(151936) * 2^-24 = 2.3e-5
    EXPECT_LT(RelativeL2(o->dw, ref.dw), 1e-5);
  }
}

TEST(LmHeadLossTest, PeakDeviceMemoryIsSetByTheChunkNotByTokensTimesVocab) {
  const Inputs in = MakeInputs();
  const uint64_t logits_row = static_cast<uint64_t>(kVocab) * 4, slack = 2 * 256;
  for (int64_t chunk : {4, 12}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Outputs c = RunHead(in, chunk);
    // Exactly the chunk's logits and the lse (as the arena rounds), whatever the token count.
    EXPECT_GE(c.head_peak_bytes, static_cast<uint64_t>(chunk) * logits_row);
    EXPECT_LE(c.head_peak_bytes, LmHeadLoss::ScratchBytes(kTokens, kHidden, kVocab, chunk) + slack);
    EXPECT_LT(c.head_peak_bytes, static_cast<uint64_t>(chunk + 1) * logits_row);
  }
  const Outputs whole = RunHead(in, 0);
  EXPECT_GE(whole.head_peak_bytes, static_cast<uint64_t>(kTokens) * logits_row);
  EXPECT_LE(whole.head_peak_bytes, LmHeadLoss::ScratchBytes(kTokens, kHidden, kVocab, 0) + slack);
}

TEST(LmHeadLossTest, AutoChunkKeepsSmallLogitsWholeAndBoundsLargeOnesByTheHiddenStates) {
  constexpr int64_t kAuto = LmHeadLoss::kAutoChunk;
  EXPECT_EQ(LmHeadLoss::RowsPerChunk(64, 1024, 151936, kAuto), 64);  // 39 MB of logits: whole
  // 4 x 2048 tokens of Qwen3-0.6B: 5 GB whole; chunks of 256 rows (155 MB).
  EXPECT_EQ(LmHeadLoss::RowsPerChunk(8192, 1024, 151936, kAuto), 256);
  // Hidden states larger than 256 rows of logits: ceil(65536 * 4096 / 128256) = 2094 -> 2112.
  EXPECT_EQ(LmHeadLoss::RowsPerChunk(65536, 4096, 128256, kAuto), 2112);
  EXPECT_EQ(LmHeadLoss::RowsPerChunk(8192, 1024, 151936, 0), 8192);
  EXPECT_EQ(LmHeadLoss::RowsPerChunk(8192, 1024, 151936, 100), 100);
}

class LmHeadLossApiTest : public strata::testing::NnTest {};

TEST_F(LmHeadLossApiTest, LogitsOnlyForwardGivesTheWholeLogitsWhateverTheChunk) {
  constexpr int64_t v = 50, h = 8, n = 6;
  const std::vector<float> w = RandomVector(v * h, 1), x = RandomVector(n * h, 2);
  Linear head("lm_head", h, v, DType::kFloat32);
  head.weight().set_data(Up(w));
  LmHeadLoss hl(device_.get(), &head, /*chunk_tokens=*/2);
  ASSERT_TRUE(
      hl.Forward(Ctx(), Tensor(Up(x), DType::kFloat32, Shape{n, h}), nullptr, 0, nullptr).ok());
  const Tensor logits = hl.logits();
  ASSERT_EQ(logits.numel(), n * v);
  std::vector<double> want(static_cast<size_t>(n * v));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < v; ++j) {
      double s = 0;
      for (int64_t k = 0; k < h; ++k) s += double{x[i * h + k]} * w[j * h + k];
      want[static_cast<size_t>(i * v + j)] = s;
    }
  }
  ExpectNear("logits", Down(static_cast<const float*>(logits.data), n * v), want, 1e-5, 1e-5);
  // No targets: nothing to differentiate.
  EXPECT_THAT(hl.Backward(Ctx(), 1.0f, Tensor()),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("Forward with targets")));
}

TEST_F(LmHeadLossApiTest, ChunkedForwardKeepsNoWholeLogitsAndRejectsANegativeChunk) {
  constexpr int64_t v = 50, h = 8, n = 6;
  Linear head("lm_head", h, v, DType::kFloat32);
  head.weight().set_data(Up(RandomVector(v * h, 1)));
  std::vector<int32_t> targets = {1, 2, kIgnoreIndex, 4, 5, kIgnoreIndex};
  LmHeadLoss hl(device_.get(), &head, 2);
  float* loss = Up(std::vector<float>{0});
  ASSERT_TRUE(hl.Forward(Ctx(), Tensor(Up(RandomVector(n * h, 2)), DType::kFloat32, Shape{n, h}),
                         Up(targets), 4, loss)
                  .ok());
  EXPECT_TRUE(hl.logits().empty());
  EXPECT_THAT(hl.set_chunk_tokens(-2),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("allowed: 0 (all tokens")));
  EXPECT_TRUE(hl.set_chunk_tokens(LmHeadLoss::kAutoChunk).ok());
}

}  // namespace
}  // namespace strata::nn
