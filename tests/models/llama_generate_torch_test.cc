// Generation with a KV cache against an independent reference: torch_llama_generate_reference.py
// runs the plain float64 PyTorch Llama WITHOUT a cache (the whole sequence recomputed at each
// step, each prompt alone) on the checkpoint the C++ side wrote. Compared: the logits of each
// prompt's last token and of every decode step (the C++ decoder fed the reference's tokens, so
// a near-tie cannot make the two drift apart), and the greedy continuation (C++ choosing its own
// tokens) token for token. Prompts of different lengths run as one padded batch. With
// rope_scaling "dynamic" past max_position_embeddings the reference instead runs as transformers'
// generate does with a KV cache (each forward's RoPE from its own length, cached keys kept).
//
// Tolerance: max |cpp - ref| <= 1e-6 + 2e-5 * max|ref| per row, as llama_torch_test's logits
// (fp32 against fp64; the test prints the worst figure).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/infer/generator.h"
#include "models/llama/llama_checkpoint.h"
#include "models/llama/model/llama_decode.h"
#include "models/llama/model/llama_model.h"
#include "nn/io/safetensors.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int64_t kSteps = 6;

LlamaConfig TestConfig() {
  LlamaConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 48;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.torch_dtype = DType::kFloat32;
  return c;
}

std::vector<double> ReadF64(const nn::SafetensorsFile& f, const std::string& name) {
  auto t = f.RawTensor(name);
  EXPECT_THAT(t, IsOk());
  if (!t.ok()) return {};
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

// Worst |got - ref| / max|ref| of one row, checked against the tolerance.
double ExpectRowClose(const std::string& what, const double* ref, const float* got, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(ref[i]));
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  EXPECT_LE(worst, 1e-6 + 2e-5 * scale) << what;
  return worst / scale;
}

class LlamaGenerateTorchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = CreateDevice(DeviceOptions{});
    ASSERT_THAT(device, IsOk());
    device_ = std::move(*device);
    LlamaModelOptions mopt;
    mopt.seed = 77;
    mopt.init_std = 0.15;  // confident enough that greedy choices are not near-ties
    mopt.allocate_grads = false;
    auto model = LlamaForCausalLM::Create(Config(), device_.get(), mopt);
    ASSERT_THAT(model, IsOk());
    model_ = std::move(*model);
    auto stream = device_->CreateStream();
    ASSERT_THAT(stream, IsOk());
    stream_ = *stream;
  }
  void TearDown() override {
    if (device_ != nullptr) {
      EXPECT_THAT(device_->DestroyStream(stream_), IsOk());
    }
  }
  nn::RunContext Ctx() const { return nn::RunContext{device_.get(), stream_, false}; }
  virtual LlamaConfig Config() const { return TestConfig(); }

  // Runs the reference on `prompts`; false (and a skip or failure recorded) if it cannot.
  // cache: the reference runs as transformers' generate with a KV cache (see the script).
  bool RunReference(const std::vector<std::vector<int32_t>>& prompts, bool cache = false) {
    const std::string model_dir = dir_.File("model");
    EXPECT_THAT(SaveLlamaForCausalLM(model_dir, *model_, stream_), IsOk());
    std::ofstream(dir_.File("prompts.json"))
        << nlohmann::json{{"prompts", prompts}, {"steps", kSteps}, {"cache", cache}}.dump();
    const std::string out = dir_.File("reference.safetensors");
    const std::string script =
        std::string(STRATA_SOURCE_DIR) + "/tests/models/torch_llama_generate_reference.py";
    const std::string cmd = std::string(kPython) + " " + script + " " + model_dir + " " +
                            dir_.File("prompts.json") + " " + out + " 2>" + dir_.File("err.txt");
    if (std::system(cmd.c_str()) != 0) {
      if (std::system((std::string(kPython) + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
        skip_ = std::string(kPython) + " cannot import torch (apt-get install python3-torch)";
        return false;
      }
      std::ifstream err(dir_.File("err.txt"));
      ADD_FAILURE() << "reference failed: " << cmd << "\n"
                    << std::string(std::istreambuf_iterator<char>(err), {});
      return false;
    }
    auto ref = nn::SafetensorsFile::Open(out);
    EXPECT_THAT(ref, IsOk());
    if (!ref.ok()) return false;
    for (size_t b = 0; b < prompts.size(); ++b) {
      ref_logits_.push_back(ReadF64(*ref, "logits." + std::to_string(b)));
      std::vector<int32_t> toks;
      for (double t : ReadF64(*ref, "tokens." + std::to_string(b))) {
        toks.push_back(static_cast<int32_t>(t));
      }
      ref_tokens_.push_back(toks);
    }
    return true;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<LlamaForCausalLM> model_;
  Stream stream_;
  strata::testing::ScratchDir dir_;
  std::string skip_;
  std::vector<std::vector<double>> ref_logits_;
  std::vector<std::vector<int32_t>> ref_tokens_;
};

std::vector<std::vector<int32_t>> Prompts() {
  // Three prompts of different lengths (one of a single token) in one padded batch.
  return {{5, 17, 42, 8, 91, 3, 60, 12, 33}, {70}, {1, 2, 3, 4}};
}

TEST_F(LlamaGenerateTorchTest, PrefillAndEachDecodeStepMatchTheUncachedReference) {
  const auto prompts = Prompts();
  if (!RunReference(prompts)) {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    return;
  }
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  const DeviceMemoryStats before = device_->MemoryStats();
  auto dec = LlamaDecoder::Create(model_.get(), 4, 9 + kSteps + 1);
  ASSERT_THAT(dec, IsOk());
  std::vector<float> logits;
  ASSERT_THAT((*dec)->Prefill(Ctx(), prompts, &logits), IsOk());
  double worst = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    std::vector<int32_t> feed;
    for (size_t b = 0; b < prompts.size(); ++b) {
      worst = std::max(
          worst,
          ExpectRowClose("sequence " + std::to_string(b) + " step " + std::to_string(step),
                         ref_logits_[b].data() + step * vocab, logits.data() + b * vocab, vocab));
      feed.push_back(ref_tokens_[b][static_cast<size_t>(step)]);
    }
    if (step < kSteps) {
      ASSERT_THAT((*dec)->Decode(Ctx(), feed, &logits), IsOk());
    }
  }
  std::printf("worst logits error / max|reference| over prefill and %lld steps: %.2e\n",
              static_cast<long long>(kSteps), worst);
  // The cache and workspace stay within their plan and go back when released. The plan counts
  // the norms' statistics (5 RmsNorms x 64 tokens x 4 bytes), which the modules own and keep.
  const infer::KvCachePlan plan = (*dec)->plan();
  const uint64_t norm_stats = 5 * 64 * 4;
  const DeviceMemoryStats during = device_->MemoryStats();
  EXPECT_EQ((*dec)->allocated_bytes() + norm_stats, plan.total_bytes());
  EXPECT_LE(during.peak_bytes - before.in_use_bytes, plan.total_bytes());
  (*dec)->Release();
  EXPECT_EQ((*dec)->allocated_bytes(), 0u);
  const DeviceMemoryStats after = device_->MemoryStats();
  EXPECT_LE(after.in_use_bytes - before.in_use_bytes, norm_stats)
      << "only the norms' statistics (planned) may stay";
}

TEST_F(LlamaGenerateTorchTest, GreedyContinuationsEqualTheReferenceAndStopConditionsHold) {
  const auto prompts = Prompts();
  if (!RunReference(prompts)) {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    return;
  }
  auto dec = LlamaDecoder::Create(model_.get(), 3, 9 + kSteps + 1);
  ASSERT_THAT(dec, IsOk());
  infer::GenerateOptions o;
  o.max_new_tokens = kSteps + 1;
  std::vector<std::vector<int32_t>> streamed(prompts.size());
  auto r = infer::Generate(**dec, Ctx(), prompts, o, [&](int64_t b, int32_t t) {
    streamed[static_cast<size_t>(b)].push_back(t);
  });
  ASSERT_THAT(r, IsOk());
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(r->tokens[b], ref_tokens_[b]) << "sequence " << b;
    EXPECT_EQ(streamed[b], r->tokens[b]) << "every token is streamed once, in order";
    EXPECT_EQ(r->finish_reasons[b], "length");
  }
  EXPECT_EQ(r->decode_steps, kSteps);

  // A stop id: sequence 0's third greedy token. Sequence 0 stops on it (kept), the others go on
  // unless they meet it too.
  o.stop_ids = {ref_tokens_[0][2]};
  auto s = infer::Generate(**dec, Ctx(), prompts, o);
  ASSERT_THAT(s, IsOk());
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto& ref = ref_tokens_[b];
    const auto hit = std::find(ref.begin(), ref.end(), o.stop_ids[0]);
    const std::vector<int32_t> want(ref.begin(), hit == ref.end() ? ref.end() : hit + 1);
    EXPECT_EQ(s->tokens[b], want) << "sequence " << b;
    EXPECT_EQ(s->finish_reasons[b], hit == ref.end() ? "length" : "stop");
  }
  EXPECT_EQ(s->tokens[0].size(), 3u);
}

TEST_F(LlamaGenerateTorchTest, SamplingIsReproducibleUnderASeed) {
  auto dec = LlamaDecoder::Create(model_.get(), 3, 9 + 12);
  ASSERT_THAT(dec, IsOk());
  infer::GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 1.5;
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.95;
  o.sampling.seed = 11;
  auto a = infer::Generate(**dec, Ctx(), Prompts(), o);
  auto b = infer::Generate(**dec, Ctx(), Prompts(), o);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->tokens, b->tokens);
  o.sampling.seed = 12;
  auto c = infer::Generate(**dec, Ctx(), Prompts(), o);
  ASSERT_THAT(c, IsOk());
  EXPECT_NE(a->tokens, c->tokens) << "another seed draws other tokens";
  // A sequence's draws do not depend on its batch: sequence 0 alone gives the same tokens.
  o.sampling.seed = 11;
  auto alone = infer::Generate(**dec, Ctx(), {Prompts()[0]}, o);
  ASSERT_THAT(alone, IsOk());
  EXPECT_EQ(alone->tokens[0], a->tokens[0]);
}

TEST_F(LlamaGenerateTorchTest, RefusesWhatTheCacheCannotHold) {
  EXPECT_THAT(LlamaDecoder::Create(model_.get(), 1, 49),
              testing::StatusIs(StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("max_position_embeddings 48")));
  EXPECT_THAT(LlamaDecoder::Create(model_.get(), 1, 49),
              testing::StatusIs(StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("only rope_scaling.rope_type \"dynamic\" goes "
                                                     "past it; this model's rope_type is "
                                                     "\"default\"")));
  auto dec = LlamaDecoder::Create(model_.get(), 1, 3);
  ASSERT_THAT(dec, IsOk());
  std::vector<float> logits;
  EXPECT_THAT((*dec)->Prefill(Ctx(), {{1, 2, 3, 4}}, &logits),
              testing::StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("1..3")));
  EXPECT_THAT((*dec)->Prefill(Ctx(), {{1}, {2}}, &logits),
              testing::StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("1..1")));
  ASSERT_THAT((*dec)->Prefill(Ctx(), {{1, 2, 3}}, &logits), IsOk());
  const int32_t tok = 4;
  EXPECT_THAT((*dec)->Decode(Ctx(), {&tok, 1}, &logits),
              testing::StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("is full")));
}

// rope_scaling "dynamic" past max_position_embeddings (10 here: the prefill of the prompts
// padded to 9 and the first decode step stay within it, the next five steps reach position 14):
// every forward's queries and keys rotate with the frequencies of its own length, the cached
// keys keeping theirs, as transformers' generate does with a KV cache (the reference's "cache"
// mode, float64).
class LlamaGenerateDynamicRopeTest : public LlamaGenerateTorchTest {
 protected:
  static LlamaConfig Dynamic() {
    LlamaConfig c = TestConfig();
    c.max_position_embeddings = 10;
    c.rope_scaling.type = RopeType::kDynamic;
    c.rope_scaling.factor = 4.0;
    return c;
  }
  LlamaConfig Config() const override { return Dynamic(); }
};

TEST_F(LlamaGenerateDynamicRopeTest, EachStepMatchesTransformersCachedGeneratePastMaxPositions) {
  const auto prompts = Prompts();
  if (!RunReference(prompts, /*cache=*/true)) {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    return;
  }
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  auto dec = LlamaDecoder::Create(model_.get(), 4, 9 + kSteps + 1);
  ASSERT_THAT(dec, IsOk());
  // The same weights with the default RoPE: their logits must be far from the reference (or
  // the comparison below could not tell dynamic from default).
  LlamaConfig plain = Dynamic();
  plain.rope_scaling = RopeScaling{};
  plain.max_position_embeddings = 64;
  LlamaModelOptions mopt;
  mopt.seed = 77;
  mopt.init_std = 0.15;
  mopt.allocate_grads = false;
  auto plain_model = LlamaForCausalLM::Create(plain, device_.get(), mopt);
  ASSERT_THAT(plain_model, IsOk());
  auto plain_dec = LlamaDecoder::Create(plain_model->get(), 4, 9 + kSteps + 1);
  ASSERT_THAT(plain_dec, IsOk());
  std::vector<float> logits, plain_logits;
  ASSERT_THAT((*dec)->Prefill(Ctx(), prompts, &logits), IsOk());
  ASSERT_THAT((*plain_dec)->Prefill(Ctx(), prompts, &plain_logits), IsOk());
  double worst = 0, plain_gap = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    std::vector<int32_t> feed;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const double* ref = ref_logits_[b].data() + step * vocab;
      worst = std::max(
          worst, ExpectRowClose("sequence " + std::to_string(b) + " step " + std::to_string(step),
                                ref, logits.data() + b * vocab, vocab));
      if (b == 0 && step >= 2) {  // the longest, past max_position_embeddings
        double scale = 0, gap = 0;
        for (size_t i = 0; i < vocab; ++i) {
          scale = std::max(scale, std::abs(ref[i]));
          gap = std::max(gap, std::abs(plain_logits[b * vocab + i] - ref[i]));
        }
        plain_gap = std::max(plain_gap, gap / scale);
      }
      feed.push_back(ref_tokens_[b][static_cast<size_t>(step)]);
    }
    if (step < kSteps) {
      ASSERT_THAT((*dec)->Decode(Ctx(), feed, &logits), IsOk());
      ASSERT_THAT((*plain_dec)->Decode(Ctx(), feed, &plain_logits), IsOk());
    }
  }
  std::printf("dynamic: worst logits error / max|reference| %.2e; the default RoPE's %.2e\n", worst,
              plain_gap);
  EXPECT_GT(plain_gap, 1e-2) << "the default RoPE would pass: the test could not fail";
  (*plain_dec)->Release();
  // The dynamic tables ([max_len, head_dim / 2] cos and sin) are in the plan.
  EXPECT_EQ((*dec)->plan().total_bytes(), PlanLlamaKvCache(plain, 4, 9 + kSteps + 1).total_bytes() +
                                              2 * (9 + kSteps + 1) * (16 / 2) * sizeof(float));
}

}  // namespace
}  // namespace strata::llama
