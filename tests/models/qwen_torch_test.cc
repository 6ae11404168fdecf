// Qwen2 / Qwen2.5 (q/k/v biases) and Qwen3 (q_norm / k_norm, head_dim != hidden / heads) on the
// Llama model, against the independent reference tests/models/torch_llama_reference.py (plain
// PyTorch in float64, run by Debian's /usr/bin/python3 on the checkpoint and config.json the C++
// exporter wrote). Logits, loss and every parameter gradient (biases and norm weights included)
// are compared, tied and untied, with grouped-query heads. Biases and q/k norm weights are set
// to random values first (they start at 0 and 1), so their forward use is tested too.
//
// Tolerances, for each tensor: max |cpp - ref| <= abs + rel * max|ref|.
//   fp32 parameters and gradients: rel 2e-5 (logits), 1e-5 (loss), 1e-4 (gradients), as
//   llama_torch_test.cc (fp32 against fp64 over hidden 64, 2 layers, 32 tokens).
//   bf16 parameters and bf16 gradient slots: the reference reads the same bf16 weights, so only
//   the gradients' rounding differs: one bf16 rounding is at most 2^-8 (3.9e-3) of the element;
//   the tied embedding's slot is rounded twice (head, then embedding). rel 1e-2 for gradients;
//   measured 3.0e-3 - 6.6e-3 (6.6e-3: the tied embedding; biases 2.4e-3). Logits and loss fp32.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
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

struct Variant {
  const char* name;
  int qwen;  // 2 or 3
  bool tied;
  DType dtype;  // parameters and gradient slots
};

LlamaConfig TestConfig(const Variant& v) {
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;  // GQA
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = v.tied;
  c.torch_dtype = v.dtype;
  c.family = v.qwen == 3 ? LlamaFamily::kQwen3 : LlamaFamily::kQwen2;
  if (v.qwen == 2) {
    c.qkv_bias = true;
  } else {
    c.qk_norm = true;
    c.explicit_head_dim = 24;  // != 64 / 4: q_proj [96, 64], o_proj [64, 96]
  }
  return c;
}

class QwenTorchTest : public ::testing::TestWithParam<Variant> {};

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
  EXPECT_THAT(t, IsOk()) << name;
  if (!t.ok()) return {};
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

TEST_P(QwenTorchTest, LogitsLossAndGradientsMatchPyTorch) {
  const Variant& variant = GetParam();
  const LlamaConfig config = TestConfig(variant);

  auto device = CreateDevice(DeviceOptions{});
  ASSERT_THAT(device, IsOk());
  LlamaModelOptions mopt;
  mopt.seed = 4321;
  mopt.init_std = 0.08;
  mopt.dtype = variant.dtype;
  mopt.grad_dtype = variant.dtype;
  auto model = LlamaForCausalLM::Create(config, device->get(), mopt);
  ASSERT_THAT(model, IsOk());
  auto stream = (*device)->CreateStream();
  ASSERT_THAT(stream, IsOk());
  const nn::RunContext ctx{device->get(), *stream, true};

  // Random biases (PyTorch-like scale) and q/k norm weights around 1.
  size_t biases = 0, qk_norms = 0;
  std::mt19937_64 rng(7);
  for (nn::Parameter* p : (*model)->NamedParameters()) {
    const bool bias = p->name().ends_with(".bias");
    const bool qk = p->name().ends_with("q_norm.weight") || p->name().ends_with("k_norm.weight");
    if (!bias && !qk) continue;
    (bias ? biases : qk_norms) += 1;
    std::normal_distribution<float> d(qk ? 1.0f : 0.0f, qk ? 0.3f : 0.5f);
    std::vector<float> v(static_cast<size_t>(p->numel()));
    for (float& x : v) x = d(rng);
    ASSERT_THAT(nn::UploadParameter(*stream, *p, v.data(), DType::kFloat32, v.size()), IsOk());
  }
  EXPECT_EQ(biases, variant.qwen == 2 ? 3u * 2 : 0u);  // q, k, v per layer
  EXPECT_EQ(qk_norms, variant.qwen == 3 ? 2u * 2 : 0u);

  strata::testing::ScratchDir dir;
  const std::string model_dir = dir.File("model");
  ASSERT_THAT(SaveLlamaForCausalLM(model_dir, **model, *stream), IsOk());
  // The written config.json names the family, and reads back as the same config.
  auto reread = ReadLlamaConfig(model_dir);
  ASSERT_THAT(reread, IsOk());
  EXPECT_EQ(reread->qwen_version(), variant.qwen);
  EXPECT_EQ(reread->qkv_bias, config.qkv_bias);
  EXPECT_EQ(reread->qk_norm, config.qk_norm);
  EXPECT_EQ(reread->head_dim(), config.head_dim());
  EXPECT_EQ(reread->NumParameters(), config.NumParameters());

  constexpr int64_t kB = 2, kT = 16;
  const auto random = strata::testing::RandomBytes(kB * kT, 98);
  std::vector<int32_t> ids(random.begin(), random.end()), labels = ids;
  labels[2] = labels[19] = -100;
  nlohmann::json tokens = {{"input_ids", nlohmann::json::array()},
                           {"labels", nlohmann::json::array()}};
  for (int64_t b = 0; b < kB; ++b) {
    tokens["input_ids"].push_back(
        std::vector<int32_t>(ids.begin() + b * kT, ids.begin() + (b + 1) * kT));
    tokens["labels"].push_back(
        std::vector<int32_t>(labels.begin() + b * kT, labels.begin() + (b + 1) * kT));
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
  const nn::TokenBatch batch{ids, labels, kB, kT};
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

  const bool bf16 = variant.dtype == DType::kBFloat16;
  const double logits_err = ExpectClose("logits", ReadF64(*ref, "logits"), logits, 2e-5, 1e-6);
  const double loss_err = ExpectClose("loss", ReadF64(*ref, "loss"), {*loss}, 1e-5, 1e-6);
  double grad_err = 0, bias_err = 0, norm_err = 0;
  size_t compared = 0;
  for (nn::Parameter* p : (*model)->NamedParameters()) {
    std::vector<float> grad(static_cast<size_t>(p->numel()));
    ASSERT_THAT(nn::DownloadParameter(*stream, *p, grad.data(), DType::kFloat32, /*grad=*/true),
                IsOk());
    const double e = ExpectClose("grad of " + p->name(), ReadF64(*ref, "grad." + p->name()), grad,
                                 bf16 ? 1e-2 : 1e-4, 1e-7);
    grad_err = std::max(grad_err, e);
    if (p->name().ends_with(".bias")) bias_err = std::max(bias_err, e);
    if (p->name().ends_with("q_norm.weight") || p->name().ends_with("k_norm.weight")) {
      norm_err = std::max(norm_err, e);
    }
    ++compared;
  }
  std::printf(
      "%s: worst error / max|reference|: logits %.2e, loss %.2e, gradients %.2e (biases %.2e, "
      "q/k norms %.2e)\n",
      variant.name, logits_err, loss_err, grad_err, bias_err, norm_err);
  const size_t per_layer = 9 + (variant.qwen == 2 ? 3 : 2);
  EXPECT_EQ(compared, 2 + per_layer * 2 + (variant.tied ? 0u : 1u));
  EXPECT_THAT((*device)->DestroyStream(*stream), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Variants, QwenTorchTest,
                         ::testing::Values(Variant{"qwen2_untied", 2, false, DType::kFloat32},
                                           Variant{"qwen3_tied", 3, true, DType::kFloat32},
                                           Variant{"qwen2_tied_bf16", 2, true, DType::kBFloat16},
                                           Variant{"qwen3_untied_bf16", 3, false,
                                                   DType::kBFloat16}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::llama
