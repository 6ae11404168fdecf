// Packed batches (TokenBatch::segment_ids / position_ids): examples packed into rows give each
// example exactly the loss and gradients it has alone - attention never crosses examples, an
// example's first label is not scored from the one before it, positions restart per example.
// The reference is the same model run on each example by itself (batch 1, seq its length):
// sum over examples of (its mean loss x its scored tokens) equals the packed mean loss x all
// scored tokens, and the same for every parameter's gradient.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "models/llama/model/llama_model.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

LlamaConfig Config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  return c;
}

class LlamaPackedTest : public ::strata::testing::NnTest,
                        public ::testing::WithParamInterface<bool> {
 protected:
  std::unique_ptr<LlamaForCausalLM> Make(const LlamaConfig& c) {
    auto m = LlamaForCausalLM::Create(c, device_.get(), {});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    std::mt19937_64 g(5);
    std::normal_distribution<float> d(0.0f, 0.3f);
    for (nn::Parameter* p : (*m)->NamedParameters()) {
      std::vector<float> v(static_cast<size_t>(p->numel()));
      for (float& x : v) x = (p->shape().ndim() == 1 ? 1.0f : 0.0f) + d(g);
      EXPECT_THAT(nn::UploadParameter(stream_, *p, v.data(), DType::kFloat32, v.size()), IsOk());
    }
    return std::move(m).value();
  }
  // Loss and gradients (name -> values), the gradients zeroed first.
  std::pair<double, std::vector<std::vector<float>>> Run(LlamaForCausalLM& m,
                                                         const nn::TokenBatch& b) {
    EXPECT_THAT(m.ZeroGrads(Ctx()), IsOk());
    EXPECT_THAT(m.Forward(Ctx(), b), IsOk());
    auto loss = m.ReadLoss(Ctx());
    EXPECT_TRUE(loss.ok());
    EXPECT_THAT(m.Backward(Ctx()), IsOk());
    EXPECT_THAT(stream_.Synchronize(), IsOk());
    std::vector<std::vector<float>> grads;
    for (nn::Parameter* p : m.NamedParameters()) {
      std::vector<float> v(static_cast<size_t>(p->numel()));
      EXPECT_THAT(nn::DownloadParameter(stream_, *p, v.data(), DType::kFloat32, true), IsOk());
      grads.push_back(std::move(v));
    }
    return {loss.ok() ? *loss : NAN, grads};
  }
};

TEST_P(LlamaPackedTest, EachPackedExampleHasItsOwnLossAndGradients) {
  const LlamaConfig c = Config(GetParam());
  auto m = Make(c);
  std::mt19937_64 g(17);
  // Row 0: examples of 2 and 5 tokens; row 1: 4 tokens, 2 tokens, then one padding token.
  const std::vector<std::vector<int64_t>> rows = {{2, 5}, {4, 2, 1}};
  const int64_t t = 7;
  std::vector<int32_t> ids, labels, segs;
  std::vector<std::vector<int32_t>> examples;
  for (const auto& row : rows) {
    int32_t seg = 0;
    for (const int64_t len : row) {
      std::vector<int32_t> ex;
      for (int64_t i = 0; i < len; ++i) ex.push_back(static_cast<int32_t>(g() % c.vocab_size));
      const bool pad = &len == &row.back() && row.size() == 3;
      for (int64_t i = 0; i < len; ++i) {
        ids.push_back(ex[static_cast<size_t>(i)]);
        labels.push_back(pad ? nn::kIgnoreIndex : ex[static_cast<size_t>(i)]);
        segs.push_back(seg);
      }
      ++seg;
      if (!pad) examples.push_back(ex);
    }
  }
  ASSERT_EQ(ids.size(), static_cast<size_t>(2 * t));
  nn::TokenBatch packed{ids, labels, 2, t};
  packed.segment_ids = segs;
  const auto [packed_loss, packed_grads] = Run(*m, packed);

  double loss_sum = 0.0;
  int64_t scored = 0;
  std::vector<std::vector<double>> grad_sum(packed_grads.size());
  for (size_t p = 0; p < grad_sum.size(); ++p) grad_sum[p].assign(packed_grads[p].size(), 0.0);
  for (const auto& ex : examples) {
    const int64_t len = static_cast<int64_t>(ex.size());
    const auto [loss, grads] = Run(*m, nn::TokenBatch{ex, ex, 1, len});
    loss_sum += loss * static_cast<double>(len - 1);
    for (size_t p = 0; p < grads.size(); ++p) {
      for (size_t i = 0; i < grads[p].size(); ++i) grad_sum[p][i] += grads[p][i] * (len - 1.0);
    }
    scored += len - 1;
  }
  EXPECT_NEAR(packed_loss, loss_sum / static_cast<double>(scored), 1e-5 * loss_sum / scored);
  const auto params = m->NamedParameters();
  for (size_t p = 0; p < grad_sum.size(); ++p) {
    std::vector<double> want(grad_sum[p].size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = grad_sum[p][i] / static_cast<double>(scored);
    ::strata::testing::ExpectNear(params[p]->name(), packed_grads[p], want, 1e-6, 1e-4);
  }

  // Without segment ids the same row is one sequence: the loss differs (the check can fail).
  const auto [unpacked_loss, unused] = Run(*m, nn::TokenBatch{ids, labels, 2, t});
  EXPECT_GT(std::abs(unpacked_loss - packed_loss), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tied, LlamaPackedTest, ::testing::Bool());

TEST_F(LlamaPackedTest, RefusesSplitSegmentsBadSizesAndPositions) {
  const LlamaConfig c = Config(false);
  auto m = Make(c);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  nn::TokenBatch b{ids, ids, 1, 4};
  const std::vector<int32_t> split = {0, 1, 0, 0};
  b.segment_ids = split;
  EXPECT_THAT(m->Forward(Ctx(), b),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("row 0, token 2")));
  const std::vector<int32_t> short_segs = {0, 0};
  b.segment_ids = short_segs;
  EXPECT_THAT(m->Forward(Ctx(), b), StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty or")));
  b.segment_ids = {};
  const std::vector<int32_t> far = {0, 1, 2, 16};
  b.position_ids = far;
  EXPECT_THAT(m->Forward(Ctx(), b),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("outside [0, 16)")));
}

}  // namespace
}  // namespace strata::llama
