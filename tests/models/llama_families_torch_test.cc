// Llama's RoPE types and Mistral's sliding window against the independent reference
// (tests/models/torch_llama_reference.py: the model written in plain PyTorch, float64, its
// rope_inv_freq and attention mask written from transformers' formulas): logits, loss and every
// parameter gradient of LlamaForCausalLM, for each case below, on the checkpoint the C++ side
// saved (so config.json's rope_scaling / sliding_window as Strata writes them is what the
// reference reads).
//
// Cases: linear; dynamic with a sequence longer than max_position_embeddings (the base
// rescaled; with activation checkpointing, whose recompute must use the same tables) and one
// within it (the default frequencies); llama3 with the three regimes of its formula present
// (kept, blended and scaled frequencies); Mistral with a window smaller than the sequence, alone
// and packed. GQA and MHA, tied and untied are spread over them.
//
// Tolerances, as llama_torch_test.cc (fp32 against fp64): max |cpp - ref| <= abs + rel *
// max|ref|, rel = 2e-5 logits, 1e-5 loss, 1e-4 gradients.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/llama/config/llama_config.h"
#include "models/llama/llama_checkpoint.h"
#include "models/llama/model/llama_model.h"
#include "nn/io/safetensors.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;

constexpr const char* kPython = "/usr/bin/python3";

std::string TorchUnavailableReason() {
  const std::string cmd = std::string(kPython) + " -c 'import torch, numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    return std::string(kPython) + " cannot import torch and numpy (apt-get install python3-torch)";
  }
  return "";
}

struct Case {
  const char* name;
  RopeScaling rope;
  LlamaFamily family = LlamaFamily::kLlama;
  int64_t sliding_window = 0;
  bool tied = false;
  int64_t kv_heads = 2;  // of 4 query heads
  int64_t max_pos = 64;
  int64_t seq = 16;
  bool packed = false;
  bool checkpointing = false;
};

void PrintTo(const Case& k, std::ostream* os) { *os << k.name; }

RopeScaling Rope(RopeType type, double factor) {
  RopeScaling r;
  r.type = type;
  r.factor = factor;
  return r;
}

// theta 10000, head_dim 16: wavelengths 2 pi 10000^(j/8) = 6.3, 20, 63, 199, 628, ... Against a
// context of 512 (high_freq_factor 4: 128; low_freq_factor 1: 512), j = 0..2 are kept, j = 3 is
// blended and j = 4..7 are divided by the factor.
RopeScaling Llama3Rope() {
  RopeScaling r = Rope(RopeType::kLlama3, 8.0);
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 512;
  return r;
}

LlamaConfig ConfigFor(const Case& k) {
  LlamaConfig c;
  c.family = k.family;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = k.kv_heads;
  c.max_position_embeddings = k.max_pos;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_scaling = k.rope;
  c.sliding_window = k.sliding_window;
  c.tie_word_embeddings = k.tied;
  c.torch_dtype = DType::kFloat32;
  return c;
}

double ExpectClose(const std::string& what, const std::vector<double>& ref,
                   const std::vector<float>& got, double rel, double abs_tol) {
  EXPECT_EQ(ref.size(), got.size()) << what;
  if (ref.size() != got.size()) return 1;
  double scale = 0, worst = 0;
  size_t worst_i = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (d > worst) worst = d, worst_i = i;
  }
  EXPECT_LE(worst, abs_tol + rel * scale)
      << what << ": worst at " << worst_i << ": C++ " << got[worst_i] << " vs reference "
      << ref[worst_i] << " (max |ref| " << scale << ")";
  return scale > 0 ? worst / scale : worst;
}

std::vector<double> ReadF64(const nn::SafetensorsFile& f, const std::string& name) {
  auto t = f.RawTensor(name);
  EXPECT_THAT(t, IsOk());
  if (!t.ok()) return {};
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

class LlamaFamiliesTorchTest : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaFamiliesTorchTest, LogitsLossAndGradientsMatchPyTorch) {
  const Case& k = GetParam();
  const LlamaConfig config = ConfigFor(k);
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_THAT(device, IsOk());
  LlamaModelOptions mopt;
  mopt.seed = 77;
  mopt.init_std = 0.08;  // the layers do more than pass the residual on
  mopt.activation_checkpointing = k.checkpointing;
  auto model = LlamaForCausalLM::Create(config, device->get(), mopt);
  ASSERT_THAT(model, IsOk());
  auto stream = (*device)->CreateStream();
  ASSERT_THAT(stream, IsOk());
  const nn::RunContext ctx{device->get(), *stream, true};

  strata::testing::ScratchDir dir;
  const std::string model_dir = dir.File("model");
  ASSERT_THAT(SaveLlamaForCausalLM(model_dir, **model, *stream), IsOk());

  // Two rows of random byte ids, a few labels ignored; packed: two examples per row.
  const int64_t B = 2, T = k.seq;
  const auto random = strata::testing::RandomBytes(static_cast<size_t>(B * T), 31);
  std::vector<int32_t> ids(random.begin(), random.end()), labels = ids, segments;
  labels[3] = labels[static_cast<size_t>(T + 5)] = -100;
  if (k.packed) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t split = b == 0 ? 7 : 10;
      for (int64_t t = 0; t < T; ++t) segments.push_back(t < split ? 0 : 1);
    }
  }
  nlohmann::json tokens;
  for (int64_t b = 0; b < B; ++b) {
    const auto row = [&](const std::vector<int32_t>& v) {
      return std::vector<int32_t>(v.begin() + b * T, v.begin() + (b + 1) * T);
    };
    tokens["input_ids"].push_back(row(ids));
    tokens["labels"].push_back(row(labels));
    if (k.packed) tokens["segment_ids"].push_back(row(segments));
  }
  std::ofstream(dir.File("tokens.json")) << tokens.dump();

  const std::string out = dir.File("reference.safetensors");
  const std::string cmd = std::string(kPython) + " " + STRATA_TORCH_REFERENCE + " " + model_dir +
                          " " + dir.File("tokens.json") + " " + out + " 2>" + dir.File("err.txt");
  if (std::system(cmd.c_str()) != 0) {
    const std::string why = TorchUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    std::ifstream err(dir.File("err.txt"));
    FAIL() << "reference failed: " << cmd << "\n"
           << std::string(std::istreambuf_iterator<char>(err), {});
  }
  auto ref = nn::SafetensorsFile::Open(out);
  ASSERT_THAT(ref, IsOk());

  ASSERT_THAT((*model)->ZeroGrads(ctx), IsOk());
  nn::TokenBatch batch{ids, labels, B, T};
  batch.segment_ids = segments;
  ASSERT_THAT((*model)->Forward(ctx, batch), IsOk());
  auto loss = (*model)->ReadLoss(ctx);
  ASSERT_THAT(loss, IsOk());
  const nn::Tensor logits_dev = (*model)->logits();
  ASSERT_FALSE(logits_dev.empty());
  std::vector<float> logits(static_cast<size_t>(logits_dev.numel()));
  ASSERT_THAT(
      stream->CopyAsync(logits.data(), logits_dev.data, logits.size() * 4, CopyKind::kDeviceToHost),
      IsOk());
  ASSERT_THAT(stream->Synchronize(), IsOk());
  ASSERT_THAT((*model)->Backward(ctx), IsOk());
  ASSERT_THAT(stream->Synchronize(), IsOk());

  const double logits_err = ExpectClose("logits", ReadF64(*ref, "logits"), logits, 2e-5, 1e-6);
  const double loss_err = ExpectClose("loss", ReadF64(*ref, "loss"), {*loss}, 1e-5, 1e-6);
  double grad_err = 0;
  size_t compared = 0;
  for (nn::Parameter* p : (*model)->NamedParameters()) {
    std::vector<float> grad(static_cast<size_t>(p->numel()));
    ASSERT_THAT(nn::DownloadParameter(*stream, *p, grad.data(), DType::kFloat32, /*grad=*/true),
                IsOk());
    grad_err = std::max(
        grad_err,
        ExpectClose("grad of " + p->name(), ReadF64(*ref, "grad." + p->name()), grad, 1e-4, 1e-7));
    ++compared;
  }
  std::printf("%s: worst error / max|reference|: logits %.2e, loss %.2e, gradients %.2e\n", k.name,
              logits_err, loss_err, grad_err);
  EXPECT_EQ(compared, 2 + 9 * 2 + (k.tied ? 0u : 1u));
  EXPECT_THAT((*device)->DestroyStream(*stream), IsOk());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LlamaFamiliesTorchTest,
    ::testing::Values(
        Case{.name = "linear_tied_gqa", .rope = Rope(RopeType::kLinear, 2.0), .tied = true},
        Case{.name = "dynamic_longer_than_max_positions_mha_checkpointed",
             .rope = Rope(RopeType::kDynamic, 2.0),
             .kv_heads = 4,
             .max_pos = 16,
             .seq = 24,
             .checkpointing = true},
        Case{.name = "dynamic_within_max_positions_tied",
             .rope = Rope(RopeType::kDynamic, 2.0),
             .tied = true,
             .max_pos = 32},
        Case{.name = "llama3_untied_gqa", .rope = Llama3Rope(), .seq = 32},
        Case{.name = "mistral_window_untied_gqa",
             .family = LlamaFamily::kMistral,
             .sliding_window = 5},
        Case{.name = "mistral_window_packed_tied",
             .family = LlamaFamily::kMistral,
             .sliding_window = 4,
             .tied = true,
             .packed = true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::llama
