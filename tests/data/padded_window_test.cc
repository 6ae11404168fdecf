// PreparedSampler's windows against the examples alone: each window holds one example from its
// first token, padded after its end with labels -100; a causal model attends only backwards, so
// the loss and every parameter gradient of the padded window equal those of the example run on
// its own (float tolerance: the shapes of the products differ). Also the labels: the first token
// of an example and the tokens outside the loss mask are -100, the others their own ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "data/prepare/prepare.h"
#include "data/prepare/prepared_sampler.h"
#include "models/data/token_file.h"
#include "models/llama/model/llama_model.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/test_util.h"

namespace strata::data {
namespace {

llama::LlamaConfig TinyConfig() {
  llama::LlamaConfig c;
  c.vocab_size = 23;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  return c;
}

struct Example {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;
};

// Writes DIR/tokens.bin (llm.c, uint16) and DIR/mask.bin as `strata data prepare` does.
void WritePrepared(const std::string& dir, const std::vector<Example>& examples) {
  std::vector<int32_t> header(256, 0);
  std::vector<uint16_t> ids;
  std::string mask;
  for (const auto& e : examples) {
    for (size_t t = 0; t < e.ids.size(); ++t) {
      ids.push_back(static_cast<uint16_t>(e.ids[t]));
      mask += static_cast<char>((e.loss[t] ? kMaskLoss : 0) | (t == 0 ? kMaskStart : 0));
    }
  }
  header[0] = kLlmcMagic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(ids.size());
  std::ofstream t(dir + "/tokens.bin", std::ios::binary);
  t.write(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
  t.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
  std::ofstream(dir + "/mask.bin", std::ios::binary) << mask;
}

class PaddedWindowTest : public ::strata::testing::NnTest {
 protected:
  struct Out {
    float loss = 0;
    std::vector<std::vector<float>> grads;
  };
  Out Run(llama::LlamaForCausalLM& m, const std::vector<int32_t>& ids,
          const std::vector<int32_t>& labels, int64_t t, const std::vector<int32_t>& positions = {},
          const std::vector<int32_t>& segments = {}) {
    EXPECT_TRUE(m.ZeroGrads(Ctx()).ok());
    nn::TokenBatch batch{ids, labels, 1, t};
    batch.position_ids = positions;
    batch.segment_ids = segments;
    Status st = m.Forward(Ctx(), batch);
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto loss = m.ReadLoss(Ctx());
    EXPECT_TRUE(loss.ok());
    EXPECT_TRUE(m.Backward(Ctx()).ok());
    EXPECT_TRUE(stream_.Synchronize().ok());
    Out o;
    o.loss = loss.ok() ? *loss : NAN;
    for (nn::Parameter* p : m.NamedParameters()) {
      std::vector<float> g(static_cast<size_t>(p->numel()));
      EXPECT_TRUE(nn::DownloadParameter(stream_, *p, g.data(), DType::kFloat32, true).ok());
      o.grads.push_back(std::move(g));
    }
    return o;
  }
};

TEST_F(PaddedWindowTest, EachWindowGivesTheExamplesOwnLossAndGradients) {
  strata::testing::ScratchDir dir;
  std::mt19937_64 g(strata::testing::TestSeed());
  const int64_t seq_len = 12;
  std::vector<Example> examples;
  for (int len : {5, 9, 3, 12}) {
    Example e;
    for (int t = 0; t < len; ++t) {
      e.ids.push_back(static_cast<int32_t>(g() % 23));
      e.loss.push_back(t >= len / 3 ? 1 : 0);  // a prompt, then the trained response
    }
    examples.push_back(e);
  }
  WritePrepared(dir.path().string(), examples);
  auto s = PreparedSampler::Open(dir.path().string(), seq_len, 5, 23, /*pad_id=*/0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->num_examples(), 4);

  llama::LlamaModelOptions mo;
  auto m = llama::LlamaForCausalLM::Create(TinyConfig(), device_.get(), mo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (nn::Parameter* p : (*m)->NamedParameters()) {
    std::vector<float> v(static_cast<size_t>(p->numel()));
    for (float& x : v) x = (p->shape().ndim() == 1 ? 1.0f : 0.0f) + d(g);
    ASSERT_TRUE(nn::UploadParameter(stream_, *p, v.data(), DType::kFloat32, v.size()).ok());
  }
  std::vector<bool> seen(examples.size(), false);
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> ids(seq_len), labels(seq_len);
    ASSERT_TRUE(s->Next(1, ids, labels).ok());
    // Which example: the one whose ids start the window.
    int which = -1;
    for (size_t e = 0; e < examples.size(); ++e) {
      if (std::equal(examples[e].ids.begin(), examples[e].ids.end(), ids.begin())) {
        which = static_cast<int>(e);
      }
    }
    ASSERT_GE(which, 0);
    seen[static_cast<size_t>(which)] = true;
    const Example& ex = examples[static_cast<size_t>(which)];
    const int64_t len = static_cast<int64_t>(ex.ids.size());
    std::vector<int32_t> alone_labels;
    for (int64_t t = 0; t < seq_len; ++t) {
      int32_t want = t < len && t > 0 && ex.loss[static_cast<size_t>(t)]
                         ? ex.ids[static_cast<size_t>(t)]
                         : -100;
      EXPECT_EQ(labels[static_cast<size_t>(t)], want) << "example " << which << " token " << t;
      if (t < len) alone_labels.push_back(want);
    }
    Out window = Run(**m, ids, labels, seq_len);
    Out alone = Run(**m, ex.ids, alone_labels, len);
    EXPECT_NEAR(window.loss, alone.loss, 1e-5f * std::max(1.0f, std::fabs(alone.loss)))
        << "example " << which;
    for (size_t p = 0; p < window.grads.size(); ++p) {
      for (size_t i = 0; i < window.grads[p].size(); ++i) {
        ASSERT_NEAR(window.grads[p][i], alone.grads[p][i],
                    1e-5f + 1e-4f * std::fabs(alone.grads[p][i]))
            << "example " << which << " parameter " << p << " element " << i;
      }
    }
  }
  EXPECT_EQ(seen, std::vector<bool>(4, true));  // one epoch visits every example once
}

TEST_F(PaddedWindowTest, PackedWindowIsTheTokenWeightedSumOfItsExamplesAlone) {
  strata::testing::ScratchDir dir;
  std::mt19937_64 g(strata::testing::TestSeed() + 1);
  const int64_t seq_len = 12;
  std::vector<Example> examples;
  for (int len : {5, 4, 3, 9, 6, 2}) {
    Example e;
    for (int t = 0; t < len; ++t) {
      e.ids.push_back(static_cast<int32_t>(g() % 23));
      e.loss.push_back(t >= len / 2 ? 1 : 0);
    }
    examples.push_back(e);
  }
  WritePrepared(dir.path().string(), examples);
  auto s = PreparedSampler::Open(dir.path().string(), seq_len, 9, 23, 0, /*pack=*/true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LT(s->num_windows(), s->num_examples());  // some windows hold several examples
  auto m = llama::LlamaForCausalLM::Create(TinyConfig(), device_.get(), {});
  ASSERT_TRUE(m.ok());
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (nn::Parameter* p : (*m)->NamedParameters()) {
    std::vector<float> v(static_cast<size_t>(p->numel()));
    for (float& x : v) x = (p->shape().ndim() == 1 ? 1.0f : 0.0f) + d(g);
    ASSERT_TRUE(nn::UploadParameter(stream_, *p, v.data(), DType::kFloat32, v.size()).ok());
  }
  int64_t seen = 0;
  for (int64_t w = 0; w < s->num_windows(); ++w) {
    std::vector<int32_t> ids(seq_len), labels(seq_len), pos(seq_len), seg(seq_len);
    ASSERT_TRUE(s->Next(1, ids, labels, pos, seg).ok());
    Out packed = Run(**m, ids, labels, seq_len, pos, seg);
    // Each segment run is an example: run it alone; weight by its scored labels.
    double total = 0, loss = 0;
    std::vector<std::vector<double>> grads(packed.grads.size());
    for (size_t p = 0; p < grads.size(); ++p) grads[p].assign(packed.grads[p].size(), 0.0);
    int64_t t = 0;
    while (t < seq_len) {
      int64_t e = t;
      while (e < seq_len && seg[static_cast<size_t>(e)] == seg[static_cast<size_t>(t)]) ++e;
      std::vector<int32_t> ex_ids(ids.begin() + t, ids.begin() + e);
      std::vector<int32_t> ex_labels(labels.begin() + t, labels.begin() + e);
      EXPECT_EQ(pos[static_cast<size_t>(t)], 0);
      EXPECT_EQ(ex_labels[0], -100);
      double n = 0;
      for (size_t k = 1; k < ex_labels.size(); ++k) n += ex_labels[k] != -100;
      if (n > 0) {
        Out alone = Run(**m, ex_ids, ex_labels, e - t);
        loss += n * alone.loss;
        for (size_t p = 0; p < grads.size(); ++p) {
          for (size_t i = 0; i < grads[p].size(); ++i) grads[p][i] += n * alone.grads[p][i];
        }
        total += n;
        ++seen;
      }
      t = e;
    }
    ASSERT_GT(total, 0);
    EXPECT_NEAR(packed.loss, loss / total, 1e-5 * std::max(1.0, std::fabs(loss / total)));
    for (size_t p = 0; p < grads.size(); ++p) {
      // The packed run sums in another order (its rows, the embedding's scatter-add over every
      // segment's tokens): fp32 error of up to ~1e-5 of the parameter's largest gradient was seen
      // (STRATA_TEST_SEED=5689419227338679066, the embedding in window 1). A segment that saw
      // another would move gradients by a share of that scale, far past the bound.
      double scale = 0;
      for (size_t i = 0; i < grads[p].size(); ++i) {
        scale = std::max(scale, std::fabs(grads[p][i] / total));
      }
      for (size_t i = 0; i < grads[p].size(); ++i) {
        const double want = grads[p][i] / total;
        ASSERT_NEAR(packed.grads[p][i], want, 1e-5 + 1e-4 * std::fabs(want) + 1e-4 * scale)
            << "window " << w << " parameter " << p << " element " << i;
      }
    }
  }
  EXPECT_EQ(seen, 6);  // every example, once per epoch
}

TEST_F(PaddedWindowTest, ExampleLongerThanTheWindowSaysHowToPrepare) {
  strata::testing::ScratchDir dir;
  WritePrepared(dir.path().string(), {Example{{1, 2, 3, 4, 5}, {1, 1, 1, 1, 1}}});
  auto s = PreparedSampler::Open(dir.path().string(), 4, 1, 23, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("prepare with --max-length 4"));
}

}  // namespace
}  // namespace strata::data
