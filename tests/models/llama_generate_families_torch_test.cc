// Generation with a KV cache for each model family Strata trains, against the float64 PyTorch
// model WITHOUT a cache (torch_llama_generate_reference.py over torch_llama_reference.py's
// llama_forward, which reads the family from the config.json the C++ side saved): the logits of
// each prompt's last token and of every decode step (the C++ decoder fed the reference's tokens,
// so a near-tie cannot make the two drift apart), then the greedy continuation (C++ choosing its
// own tokens) token for token. Three prompts of different lengths in one padded batch.
//
// Families (tiny: 2 layers, hidden 64, 4 query heads on 2 kv heads):
//   llama3_2  Llama 3.2's RoPE (rope_theta 500000, rope_scaling llama3 factor 32, low 1, high 4,
//             original context 8192: at head_dim 16 frequencies 0..3 are kept, 4 blended, 5..7
//             scaled, so all three regimes are used) and tied embeddings, as Llama-3.2-1B.
//   mistral   sliding_window 4, shorter than the longest prompt (9) and than prompt + generated
//             (15): the prefill and every later decode step attend to the last 4 positions only,
//             in a rolling cache of 7 rows that wraps (the prompt prefilled in chunks of 4). The
//             test also checks that the window changes the reference's logits (so a decoder
//             ignoring it would fail here).
//   qwen2     q/k/v biases (random, not their zero initialisation).
//   qwen3     q_norm / k_norm (weights random around 1), head_dim 24 != 64 / 4, tied.
// Every RMSNorm weight is random around 1 in every family.
//
// Tolerance: max |cpp - ref| <= 1e-6 + 2e-5 * max|ref| per row, as llama_generate_torch_test
// (fp32 against fp64; the test prints the worst figure).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/infer/generator.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/llama_checkpoint.h"
#include "models/llama/model/llama_decode.h"
#include "models/llama/model/llama_model.h"
#include "nn/io/safetensors.h"
#include "nn/tensor/parameter.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int64_t kSteps = 6;

struct Family {
  const char* name;
  LlamaFamily family;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

LlamaConfig ConfigFor(const Family& f) {
  LlamaConfig c;
  c.family = f.family;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.torch_dtype = DType::kFloat32;
  switch (f.family) {
    case LlamaFamily::kLlama:
      c.rope_theta = 500000.0;
      c.rope_scaling.type = RopeType::kLlama3;
      c.rope_scaling.factor = 32.0;
      c.rope_scaling.low_freq_factor = 1.0;
      c.rope_scaling.high_freq_factor = 4.0;
      c.rope_scaling.original_max_position_embeddings = 8192;
      c.tie_word_embeddings = true;
      break;
    case LlamaFamily::kMistral:
      c.sliding_window = 4;
      break;
    case LlamaFamily::kQwen2:
      c.rope_theta = 1000000.0;
      c.qkv_bias = true;
      break;
    case LlamaFamily::kQwen3:
      c.rope_theta = 1000000.0;
      c.qk_norm = true;
      c.explicit_head_dim = 24;  // q_proj [96, 64], o_proj [64, 96]
      c.tie_word_embeddings = true;
      break;
  }
  return c;
}

std::vector<std::vector<int32_t>> Prompts() {
  return {{5, 17, 42, 8, 91, 3, 60, 12, 33}, {70}, {1, 2, 3, 4}};
}

std::vector<double> ReadF64(const nn::SafetensorsFile& f, const std::string& name) {
  auto t = f.RawTensor(name);
  EXPECT_THAT(t, IsOk()) << name;
  if (!t.ok()) return {};
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

// The reference's per-prompt logits [kSteps + 1, vocab] and greedy tokens [kSteps + 1].
struct Reference {
  std::vector<std::vector<double>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

// Runs torch_llama_generate_reference.py on `model_dir`; an empty `skip` and a recorded failure
// when it fails while torch imports, a non-empty `skip` when torch is missing.
bool RunReference(const strata::testing::ScratchDir& dir, const std::string& model_dir,
                  const std::string& tag, Reference* ref, std::string* skip) {
  const std::string prompts = dir.File("prompts.json");
  std::ofstream(prompts) << nlohmann::json{{"prompts", Prompts()}, {"steps", kSteps}}.dump();
  const std::string out = dir.File("reference_" + tag + ".safetensors");
  const std::string err = dir.File("err_" + tag + ".txt");
  const std::string cmd = std::string(kPython) + " " + STRATA_SOURCE_DIR +
                          "/tests/models/torch_llama_generate_reference.py " + model_dir + " " +
                          prompts + " " + out + " 2>" + err;
  if (std::system(cmd.c_str()) != 0) {
    if (std::system((std::string(kPython) + " -c 'import torch, numpy' 2>/dev/null").c_str()) !=
        0) {
      *skip = std::string(kPython) + " cannot import torch (apt-get install python3-torch)";
      return false;
    }
    std::ifstream e(err);
    ADD_FAILURE() << "reference failed: " << cmd << "\n"
                  << std::string(std::istreambuf_iterator<char>(e), {});
    return false;
  }
  auto f = nn::SafetensorsFile::Open(out);
  EXPECT_THAT(f, IsOk());
  if (!f.ok()) return false;
  for (size_t b = 0; b < Prompts().size(); ++b) {
    ref->logits.push_back(ReadF64(*f, "logits." + std::to_string(b)));
    std::vector<int32_t> toks;
    for (double t : ReadF64(*f, "tokens." + std::to_string(b))) {
      toks.push_back(static_cast<int32_t>(t));
    }
    ref->tokens.push_back(toks);
  }
  return true;
}

// Worst |got - ref| / max|ref| of one row, checked against the tolerance.
double ExpectRowClose(const std::string& what, const double* ref, const float* got, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(ref[i]));
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  EXPECT_LE(worst, 1e-6 + 2e-5 * scale) << what;
  return worst / scale;
}

// Norm weights random around 1, biases random around 0 (their initialisation is 1 and 0, which
// would leave an indexing mistake in them invisible).
Status RandomiseNormsAndBiases(LlamaForCausalLM& model, const Stream& stream, size_t* biases,
                               size_t* qk_norms) {
  std::mt19937_64 rng(7);
  for (nn::Parameter* p : model.NamedParameters()) {
    const bool bias = p->name().ends_with(".bias");
    const bool norm = p->name().ends_with("norm.weight");
    if (!bias && !norm) continue;
    if (bias) ++*biases;
    if (p->name().ends_with("q_norm.weight") || p->name().ends_with("k_norm.weight")) ++*qk_norms;
    std::normal_distribution<float> d(norm ? 1.0f : 0.0f, norm ? 0.3f : 0.5f);
    std::vector<float> v(static_cast<size_t>(p->numel()));
    for (float& x : v) x = d(rng);
    STRATA_RETURN_IF_ERROR(nn::UploadParameter(stream, *p, v.data(), DType::kFloat32, v.size()));
  }
  return stream.Synchronize();
}

class LlamaGenerateFamiliesTorchTest : public ::testing::TestWithParam<Family> {};

TEST_P(LlamaGenerateFamiliesTorchTest, PrefillDecodeStepsAndGreedyTokensMatchTheUncachedReference) {
  const Family& fam = GetParam();
  const LlamaConfig config = ConfigFor(fam);
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_THAT(device, IsOk());
  auto stream = (*device)->CreateStream();
  ASSERT_THAT(stream, IsOk());
  LlamaModelOptions mopt;
  mopt.seed = 77;
  mopt.init_std = 0.15;  // confident enough that greedy choices are not near-ties
  mopt.allocate_grads = false;
  auto model = LlamaForCausalLM::Create(config, device->get(), mopt);
  ASSERT_THAT(model, IsOk());
  size_t biases = 0, qk_norms = 0;
  ASSERT_THAT(RandomiseNormsAndBiases(**model, *stream, &biases, &qk_norms), IsOk());
  EXPECT_EQ(biases, fam.family == LlamaFamily::kQwen2 ? 3u * 2 : 0u);  // q, k, v per layer
  EXPECT_EQ(qk_norms, fam.family == LlamaFamily::kQwen3 ? 2u * 2 : 0u);

  strata::testing::ScratchDir dir;
  const std::string model_dir = dir.File("model");
  ASSERT_THAT(SaveLlamaForCausalLM(model_dir, **model, *stream), IsOk());
  Reference ref;
  std::string skip;
  if (!RunReference(dir, model_dir, "model", &ref, &skip)) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    return;
  }

  const nn::RunContext ctx{device->get(), *stream, false};
  const auto prompts = Prompts();
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  const int64_t max_len = 9 + kSteps + 1;
  const DeviceMemoryStats before = (*device)->MemoryStats();
  auto dec = LlamaDecoder::Create(model->get(), 3, max_len);
  ASSERT_THAT(dec, IsOk());
  // The cache: every position, or for Mistral a rolling cache of 2 * window - 1 = 7 rows (the
  // window's 3 earlier positions and a prefill chunk of 4), the 9-token prompt prefilled in 3
  // chunks of at most 4.
  const infer::KvCachePlan plan = (*dec)->plan();
  const bool rolling = fam.family == LlamaFamily::kMistral;
  EXPECT_EQ(plan.cache_rows, rolling ? 7 : max_len);
  EXPECT_EQ(plan.prefill_chunk, rolling ? 4 : max_len);
  EXPECT_EQ(plan.cache_bytes,
            static_cast<uint64_t>(2 * config.num_hidden_layers * 3 * plan.cache_rows *
                                  config.num_key_value_heads * config.head_dim() * 4));
  std::vector<float> logits;
  ASSERT_THAT((*dec)->Prefill(ctx, prompts, &logits), IsOk());
  double worst = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    std::vector<int32_t> feed;
    for (size_t b = 0; b < prompts.size(); ++b) {
      worst =
          std::max(worst, ExpectRowClose(std::string(fam.name) + " sequence " + std::to_string(b) +
                                             " step " + std::to_string(step),
                                         ref.logits[b].data() + step * vocab,
                                         logits.data() + b * vocab, vocab));
      feed.push_back(ref.tokens[b][static_cast<size_t>(step)]);
    }
    if (step < kSteps) {
      ASSERT_THAT((*dec)->Decode(ctx, feed, &logits), IsOk());
    }
  }
  std::printf("%s: worst logits error / max|reference| over prefill and %lld steps: %.2e\n",
              fam.name, static_cast<long long>(kSteps), worst);
  EXPECT_LE((*device)->MemoryStats().peak_bytes - before.in_use_bytes, plan.total_bytes());

  infer::GenerateOptions o;
  o.max_new_tokens = kSteps + 1;
  auto r = infer::Generate(**dec, ctx, prompts, o);
  ASSERT_THAT(r, IsOk());
  for (size_t b = 0; b < prompts.size(); ++b) {
    EXPECT_EQ(r->tokens[b], ref.tokens[b]) << fam.name << " sequence " << b;
  }

  if (fam.family == LlamaFamily::kMistral) {
    // The window must matter for this test to check it: the same weights without a window give
    // other logits wherever a query sees more than 4 positions (sequence 0 throughout).
    const std::string open_dir = dir.File("no_window");
    std::filesystem::create_directories(open_dir);
    nlohmann::json cj = nlohmann::json::parse(std::ifstream(model_dir + "/config.json"));
    ASSERT_EQ(cj.at("sliding_window"), 4);
    cj["sliding_window"] = nullptr;
    std::ofstream(open_dir + "/config.json") << cj.dump();
    std::filesystem::create_symlink(model_dir + "/model.safetensors",
                                    open_dir + "/model.safetensors");
    Reference open;
    ASSERT_TRUE(RunReference(dir, open_dir, "no_window", &open, &skip));
    double scale = 0, diff = 0;
    for (size_t i = 0; i < vocab; ++i) {
      scale = std::max(scale, std::abs(ref.logits[0][i]));
      diff = std::max(diff, std::abs(ref.logits[0][i] - open.logits[0][i]));
    }
    std::printf("mistral: the window moves sequence 0's prefill logits by %.2e of max|ref|\n",
                diff / scale);
    EXPECT_GT(diff, 100 * (1e-6 + 2e-5 * scale)) << "the window does not change the logits";
  }
  dec->reset();
  model->reset();
  EXPECT_THAT((*device)->DestroyStream(*stream), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaGenerateFamiliesTorchTest,
                         ::testing::Values(Family{"llama3_2", LlamaFamily::kLlama},
                                           Family{"mistral", LlamaFamily::kMistral},
                                           Family{"qwen2", LlamaFamily::kQwen2},
                                           Family{"qwen3", LlamaFamily::kQwen3}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::llama
