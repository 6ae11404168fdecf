// LlamaForCausalLM against a plain double-precision Llama written in the test
// (llama_model_reference.h): Hugging Face names and order, forward logits and loss, every
// parameter's gradient by central finite differences of the reference (tiny config with
// grouped-query heads, tied and untied), hooks, gradient accumulation, activation checkpointing
// (device and pinned CPU), the bf16 storage path, and errors.
//
// Tolerances: logits 2e-5 absolute + 1e-4 relative; loss 1e-5 relative; gradients 3e-4 absolute
// + 3e-3 relative (fp32 model against double finite differences with step 1e-4).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "models/llama/model/llama_layers.h"
#include "models/llama/model/llama_model.h"
#include "tests/models/llama_model_reference.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::strata::testing::Weights;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

LlamaConfig TinyConfig(bool tied, int64_t layers = 2) {
  LlamaConfig c;
  c.vocab_size = 19;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;  // grouped-query
  c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

struct Batch {
  int64_t b = 2, t = 6;
  std::vector<int32_t> ids, labels;
  nn::TokenBatch View() const { return {ids, labels, b, t}; }
};

Batch MakeBatch(int64_t vocab, uint64_t seed) {
  Batch x;
  std::mt19937_64 g(seed);
  for (int64_t i = 0; i < x.b * x.t; ++i) x.ids.push_back(static_cast<int32_t>(g() % vocab));
  x.labels = x.ids;
  x.labels[3] = nn::kIgnoreIndex;  // one ignored label
  return x;
}

class LlamaModelTest : public ::strata::testing::NnTest {
 protected:
  std::unique_ptr<LlamaForCausalLM> Make(const LlamaConfig& c, LlamaModelOptions o = {}) {
    auto m = LlamaForCausalLM::Create(c, device_.get(), o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return nullptr;
    // Larger than init_std so the gradients are not tiny; norms away from 1.
    std::mt19937_64 g(o.seed + 99);
    std::normal_distribution<float> d(0.0f, 0.3f);
    for (nn::Parameter* p : (*m)->NamedParameters()) {
      std::vector<float> v(static_cast<size_t>(p->numel()));
      for (float& x : v) x = (p->shape().ndim() == 1 ? 1.0f : 0.0f) + d(g);
      EXPECT_THAT(nn::UploadParameter(stream_, *p, v.data(), DType::kFloat32, v.size()), IsOk());
    }
    return std::move(m).value();
  }

  Weights Read(const LlamaForCausalLM& m, bool grad = false) {
    Weights w;
    for (nn::Parameter* p : m.NamedParameters()) {
      std::vector<float> v(static_cast<size_t>(p->numel()));
      EXPECT_THAT(nn::DownloadParameter(stream_, *p, v.data(), DType::kFloat32, grad), IsOk());
      w[p->name()] = std::vector<double>(v.begin(), v.end());
    }
    return w;
  }

  float RunStep(LlamaForCausalLM& m, const Batch& x) {
    EXPECT_THAT(m.Forward(Ctx(), x.View()), IsOk());
    auto loss = m.ReadLoss(Ctx());
    EXPECT_TRUE(loss.ok()) << loss.status().ToString();
    EXPECT_THAT(m.Backward(Ctx()), IsOk());
    EXPECT_THAT(stream_.Synchronize(), IsOk());
    return loss.ok() ? *loss : NAN;
  }
};

TEST_F(LlamaModelTest, ParameterNamesAndShapesAreHuggingFaces) {
  for (bool tied : {false, true}) {
    auto m = Make(TinyConfig(tied, 1));
    std::vector<std::string> names;
    for (nn::Parameter* p : m->NamedParameters()) names.push_back(p->name());
    std::vector<std::string> want = {"model.embed_tokens.weight",
                                     "model.layers.0.self_attn.q_proj.weight",
                                     "model.layers.0.self_attn.k_proj.weight",
                                     "model.layers.0.self_attn.v_proj.weight",
                                     "model.layers.0.self_attn.o_proj.weight",
                                     "model.layers.0.mlp.gate_proj.weight",
                                     "model.layers.0.mlp.up_proj.weight",
                                     "model.layers.0.mlp.down_proj.weight",
                                     "model.layers.0.input_layernorm.weight",
                                     "model.layers.0.post_attention_layernorm.weight",
                                     "model.norm.weight"};
    if (!tied) want.push_back("lm_head.weight");
    EXPECT_THAT(names, ElementsAreArray(want)) << "tied " << tied;
    EXPECT_EQ(m->FindParameter("model.layers.0.self_attn.k_proj.weight")->shape(),
              (nn::Shape{8, 16}));  // kv_heads * head_dim = 2 * 4
    EXPECT_EQ(m->FindParameter("model.layers.0.mlp.down_proj.weight")->shape(),
              (nn::Shape{16, 24}));
    int64_t total = 0;
    for (nn::Parameter* p : m->NamedParameters()) total += p->numel();
    EXPECT_EQ(total, TinyConfig(tied, 1).NumParameters());
  }
}

TEST_F(LlamaModelTest, ForwardMatchesDoublePrecisionReference) {
  for (bool tied : {false, true}) {
    const LlamaConfig c = TinyConfig(tied);
    auto m = Make(c);
    const Batch x = MakeBatch(c.vocab_size, 5);
    ASSERT_THAT(m->Forward(Ctx(), x.View()), IsOk());
    auto loss = m->ReadLoss(Ctx());
    ASSERT_TRUE(loss.ok());
    const auto ref = ::strata::testing::LlamaReference(c, Read(*m), x.ids, x.labels, x.b, x.t);
    const nn::Tensor logits = m->logits();
    ASSERT_EQ(logits.shape, (nn::Shape{x.b, x.t, c.vocab_size}));
    ::strata::testing::ExpectNear("logits", Down(logits.f32(), logits.numel()), ref.logits, 2e-5,
                                  1e-4);
    EXPECT_NEAR(*loss, ref.loss, 1e-5 * ref.loss) << "tied " << tied;
  }
}

void CheckGradients(LlamaModelTest* t, const LlamaConfig& c, const Weights& w, const Weights& g,
                    const Batch& x) {
  // Up to 10 entries of every parameter, spread over it.
  for (const auto& [name, values] : w) {
    Weights pert = w;
    std::vector<double>& p = pert[name];
    const size_t step = std::max<size_t>(1, p.size() / 10);
    std::vector<double> sub;
    std::vector<float> analytic;
    std::vector<size_t> where;
    for (size_t i = 0; i < p.size(); i += step) {
      where.push_back(i);
      sub.push_back(p[i]);
      analytic.push_back(static_cast<float>(g.at(name)[i]));
    }
    ::strata::testing::ExpectGradientMatchesFiniteDifferences(
        name, sub,
        [&](const std::vector<double>& v) {
          for (size_t k = 0; k < where.size(); ++k) p[where[k]] = v[k];
          return ::strata::testing::LlamaReference(c, pert, x.ids, x.labels, x.b, x.t).loss;
        },
        analytic, 3e-4, 3e-3);
  }
  (void)t;
}

TEST_F(LlamaModelTest, GradientsMatchFiniteDifferencesUntied) {
  const LlamaConfig c = TinyConfig(false);
  auto m = Make(c);
  const Batch x = MakeBatch(c.vocab_size, 7);
  RunStep(*m, x);
  CheckGradients(this, c, Read(*m), Read(*m, true), x);
}

TEST_F(LlamaModelTest, GradientsMatchFiniteDifferencesTied) {
  const LlamaConfig c = TinyConfig(true);
  auto m = Make(c);
  const Batch x = MakeBatch(c.vocab_size, 8);
  RunStep(*m, x);
  CheckGradients(this, c, Read(*m), Read(*m, true), x);
}

TEST_F(LlamaModelTest, GradientsAccumulateAcrossMicroBatches) {
  const LlamaConfig c = TinyConfig(false);
  auto m = Make(c);
  const Batch x1 = MakeBatch(c.vocab_size, 9), x2 = MakeBatch(c.vocab_size, 10);
  RunStep(*m, x1);
  const Weights g1 = Read(*m, true);
  ASSERT_THAT(m->ZeroGrads(Ctx()), IsOk());
  RunStep(*m, x2);
  const Weights g2 = Read(*m, true);
  ASSERT_THAT(m->ZeroGrads(Ctx()), IsOk());
  RunStep(*m, x1);
  RunStep(*m, x2);
  for (const auto& [name, sum] : Read(*m, true)) {
    std::vector<double> want(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) want[i] = g1.at(name)[i] + g2.at(name)[i];
    ::strata::testing::ExpectNear(name, std::vector<float>(sum.begin(), sum.end()), want, 1e-6,
                                  1e-5);
  }
}

TEST_F(LlamaModelTest, ActivationCheckpointingGivesTheSameGradients) {
  const LlamaConfig c = TinyConfig(false, 3);
  const Batch x = MakeBatch(c.vocab_size, 11);
  auto plain = Make(c);
  const float loss0 = RunStep(*plain, x);
  const Weights want = Read(*plain, true);
  for (bool cpu : {false, true}) {
    LlamaModelOptions o;
    o.activation_checkpointing = true;
    o.cpu_checkpointing = cpu;
    auto m = Make(c, o);
    EXPECT_EQ(RunStep(*m, x), loss0);
    // Same kernels on the same inputs: bit for bit.
    for (const auto& [name, g] : Read(*m, true))
      EXPECT_EQ(g, want.at(name)) << name << " cpu " << cpu;
  }
}

class Recorder : public nn::ModuleHooks {
 public:
  Status OnHook(nn::HookPoint point, nn::Module& m, const nn::RunContext&) override {
    events.push_back(std::string(nn::HookPointName(point)) + " " + m.name());
    return Status::Ok();
  }
  std::vector<std::string> events;
};

TEST_F(LlamaModelTest, HooksFireInOrderWithNames) {
  const LlamaConfig c = TinyConfig(false, 1);
  for (bool ckpt : {false, true}) {
    LlamaModelOptions o;
    o.activation_checkpointing = ckpt;
    auto m = Make(c, o);
    Recorder r;
    m->AddHooksRecursive(&r);
    RunStep(*m, MakeBatch(c.vocab_size, 12));
    auto fwd_layer = [](std::vector<std::string>* e) {
      for (std::string s : {"model.layers.0", "model.layers.0.input_layernorm"}) {
        e->push_back("pre_forward " + s);
      }
      e->push_back("post_forward model.layers.0.input_layernorm");
      e->push_back("pre_forward model.layers.0.self_attn");
      for (std::string p : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        e->push_back("pre_forward model.layers.0.self_attn." + p);
        e->push_back("post_forward model.layers.0.self_attn." + p);
      }
      e->push_back("post_forward model.layers.0.self_attn");
      e->push_back("pre_forward model.layers.0.post_attention_layernorm");
      e->push_back("post_forward model.layers.0.post_attention_layernorm");
      e->push_back("pre_forward model.layers.0.mlp");
      for (std::string p : {"gate_proj", "up_proj", "down_proj"}) {
        e->push_back("pre_forward model.layers.0.mlp." + p);
        e->push_back("post_forward model.layers.0.mlp." + p);
      }
      e->push_back("post_forward model.layers.0.mlp");
    };
    std::vector<std::string> want = {"pre_forward ", "pre_forward model",
                                     "pre_forward model.embed_tokens",
                                     "post_forward model.embed_tokens"};
    fwd_layer(&want);
    want.push_back("post_forward model.layers.0");
    for (std::string s :
         {"pre_forward model.norm", "post_forward model.norm", "post_forward model",
          "pre_forward lm_head", "post_forward lm_head", "post_forward ", "pre_backward ",
          "pre_backward lm_head", "post_backward lm_head", "pre_backward model",
          "pre_backward model.norm", "post_backward model.norm", "pre_backward model.layers.0"}) {
      want.push_back(s);
    }
    if (ckpt) {  // the recomputed forward, inside the layer's backward
      std::vector<std::string> again;
      fwd_layer(&again);
      want.insert(want.end(), again.begin() + 1, again.end());
    }
    for (std::string s : {"pre_backward model.layers.0.mlp",
                          "pre_backward model.layers.0.mlp.down_proj",
                          "post_backward model.layers.0.mlp.down_proj",
                          "pre_backward model.layers.0.mlp.gate_proj",
                          "post_backward model.layers.0.mlp.gate_proj",
                          "pre_backward model.layers.0.mlp.up_proj",
                          "post_backward model.layers.0.mlp.up_proj",
                          "post_backward model.layers.0.mlp",
                          "pre_backward model.layers.0.post_attention_layernorm",
                          "post_backward model.layers.0.post_attention_layernorm",
                          "pre_backward model.layers.0.self_attn",
                          "pre_backward model.layers.0.self_attn.o_proj",
                          "post_backward model.layers.0.self_attn.o_proj",
                          "pre_backward model.layers.0.self_attn.q_proj",
                          "post_backward model.layers.0.self_attn.q_proj",
                          "pre_backward model.layers.0.self_attn.k_proj",
                          "post_backward model.layers.0.self_attn.k_proj",
                          "pre_backward model.layers.0.self_attn.v_proj",
                          "post_backward model.layers.0.self_attn.v_proj",
                          "post_backward model.layers.0.self_attn",
                          "pre_backward model.layers.0.input_layernorm",
                          "post_backward model.layers.0.input_layernorm",
                          "post_backward model.layers.0",
                          "pre_backward model.embed_tokens",
                          "post_backward model.embed_tokens",
                          "post_backward model",
                          "post_backward "}) {
      want.push_back(s);
    }
    EXPECT_THAT(r.events, ElementsAreArray(want)) << "checkpointing " << ckpt;
    m->RemoveHooksRecursive(&r);
  }
}

class FailingHook : public nn::ModuleHooks {
 public:
  Status OnHook(nn::HookPoint point, nn::Module& m, const nn::RunContext&) override {
    if (point == nn::HookPoint::kPreForward && m.name() == "model.layers.1.mlp") {
      return UnavailableError("gather failed");
    }
    return Status::Ok();
  }
};

TEST_F(LlamaModelTest, HookErrorStopsTheForwardNamingTheModule) {
  const LlamaConfig c = TinyConfig(false);
  auto m = Make(c);
  FailingHook h;
  m->AddHooksRecursive(&h);
  EXPECT_THAT(m->Forward(Ctx(), MakeBatch(c.vocab_size, 1).View()),
              StatusIs(StatusCode::kUnavailable,
                       HasSubstr("pre_forward hook of model.layers.1.mlp: gather failed")));
}

TEST_F(LlamaModelTest, Bf16StorageMatchesReferenceOnRoundedWeights) {
  // Weights stored as bf16 are exact in fp32, so the fp32-compute model must match the double
  // reference on the rounded weights with the fp32 tolerances; gradients stay fp32.
  const LlamaConfig c = TinyConfig(false);
  LlamaModelOptions o;
  o.dtype = DType::kBFloat16;
  auto m = Make(c, o);
  ASSERT_EQ(m->NamedParameters()[0]->dtype(), DType::kBFloat16);
  const Batch x = MakeBatch(c.vocab_size, 13);
  const float loss = RunStep(*m, x);
  const Weights w = Read(*m);
  const auto ref = ::strata::testing::LlamaReference(c, w, x.ids, x.labels, x.b, x.t);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * ref.loss);
  CheckGradients(this, c, w, Read(*m, true), x);
}

TEST_F(LlamaModelTest, RefusesWhatItCannotRun) {
  LlamaConfig c = TinyConfig(false);
  c.num_key_value_heads = 3;
  EXPECT_THAT(LlamaForCausalLM::Create(c, device_.get()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("num_key_value_heads")));
  c = TinyConfig(false);
  c.hidden_size = 18;
  EXPECT_THAT(LlamaForCausalLM::Create(c, device_.get()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("hidden_size")));
  LlamaModelOptions o;
  o.cpu_checkpointing = true;
  EXPECT_THAT(LlamaForCausalLM::Create(TinyConfig(false), device_.get(), o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("activation_checkpointing")));
  auto m = Make(TinyConfig(false));
  EXPECT_THAT(m->Backward(Ctx()),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("Forward with labels")));
  Batch x = MakeBatch(19, 1);
  x.t = 40, x.b = 1;
  x.ids.resize(40), x.labels.clear();
  EXPECT_THAT(m->Forward(Ctx(), x.View()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_position_embeddings 32")));
}

TEST_F(LlamaModelTest, UnplacedParameterIsAnErrorNamingIt) {
  LlamaModelOptions o;
  o.allocate_parameters = false;
  auto m = LlamaForCausalLM::Create(TinyConfig(false), device_.get(), o);
  ASSERT_TRUE(m.ok());
  for (nn::Parameter* p : (*m)->NamedParameters()) EXPECT_EQ(p->data(), nullptr);
  EXPECT_THAT((*m)->Forward(Ctx(), MakeBatch(19, 1).View()),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("parameter model.embed_tokens.weight [19, 16] has no storage")));
}

}  // namespace
}  // namespace strata::llama
