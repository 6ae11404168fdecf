// LlamaForCausalLM with its LM head and loss in chunks of tokens (lm_head_chunk_tokens): the
// loss and every parameter's gradient equal the whole-logits model's on the same weights within
// fp32 rounding, tied and untied, with chunks that do not divide the tokens and labels that
// cross sequence boundaries; a forward without labels still gives the whole logits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "models/llama/model/llama_model.h"
#include "nn/modules/lm/lm_head_loss.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

LlamaConfig Config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 3001;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  return c;
}

class LlamaLmHeadChunkTest : public ::strata::testing::NnTest {
 protected:
  struct Result {
    float loss = 0;
    std::vector<std::vector<float>> grads;
  };

  Result RunModel(bool tied, int64_t chunk, float loss_scale) {
    LlamaModelOptions o;
    o.seed = 3;
    o.init_std = 0.3;
    o.lm_head_chunk_tokens = chunk;
    auto m = LlamaForCausalLM::Create(Config(tied), device_.get(), o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    Result r;
    if (!m.ok()) return r;
    const int64_t b = 3, t = 7;
    std::vector<int32_t> ids(b * t), labels(b * t);
    std::mt19937_64 g(5);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>(g() % 3001);
      labels[i] = i % 5 == 2 ? nn::kIgnoreIndex : static_cast<int32_t>(g() % 3001);
    }
    EXPECT_THAT((*m)->Forward(Ctx(), {ids, labels, b, t}), IsOk());
    auto loss = (*m)->ReadLoss(Ctx());
    EXPECT_TRUE(loss.ok());
    r.loss = loss.ok() ? *loss : NAN;
    EXPECT_EQ((*m)->logits().empty(), chunk > 0 && chunk < b * t);
    EXPECT_THAT((*m)->Backward(Ctx(), loss_scale), IsOk());
    for (nn::Parameter* p : (*m)->NamedParameters()) {
      std::vector<float> v(static_cast<size_t>(p->numel()));
      EXPECT_THAT(nn::DownloadParameter(stream_, *p, v.data(), DType::kFloat32, true), IsOk());
      r.grads.push_back(std::move(v));
    }
    // Logits only (no labels): whole, whatever the chunk.
    EXPECT_THAT((*m)->Forward(Ctx(), {ids, {}, b, t}), IsOk());
    EXPECT_THAT(stream_.Synchronize(), IsOk());
    EXPECT_EQ((*m)->logits().numel(), b * t * 3001);
    return r;
  }
};

TEST_F(LlamaLmHeadChunkTest, ChunkedHeadGivesTheWholeHeadsLossAndGradients) {
  for (bool tied : {false, true}) {
    const Result whole = RunModel(tied, 0, 4.0f);
    for (int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{10}, nn::LmHeadLoss::kAutoChunk}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + ", chunk " + std::to_string(chunk));
      const Result c = RunModel(tied, chunk, 4.0f);
      EXPECT_NEAR(c.loss, whole.loss, 2e-6 * std::abs(whole.loss));
      ASSERT_EQ(c.grads.size(), whole.grads.size());
      // Per parameter, norm-wise: a different GEMM blocking (1-row chunks) reorders fp32 sums,
      // and two layers' backward carry that rounding into entries that cancel.
      for (size_t i = 0; i < c.grads.size(); ++i) {
        double num = 0, den = 0;
        for (size_t k = 0; k < c.grads[i].size(); ++k) {
          const double d = double{c.grads[i][k]} - whole.grads[i][k];
          num += d * d;
          den += double{whole.grads[i][k]} * whole.grads[i][k];
        }
        EXPECT_LT(std::sqrt(num / den), 2e-5) << "parameter " << i;
      }
    }
  }
}

TEST_F(LlamaLmHeadChunkTest, RejectsANegativeChunk) {
  LlamaModelOptions o;
  o.lm_head_chunk_tokens = -5;
  EXPECT_THAT(LlamaForCausalLM::Create(Config(false), device_.get(), o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("lm_head_chunk_tokens -5")));
}

}  // namespace
}  // namespace strata::llama
