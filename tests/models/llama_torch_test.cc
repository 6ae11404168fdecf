// LlamaForCausalLM against an independent reference: tests/models/torch_llama_reference.py, a
// Llama written in plain PyTorch (float64), run by Debian's /usr/bin/python3 on the checkpoint
// the C++ exporter wrote. Logits, loss and every parameter gradient are compared.
//
// Tolerances (the C++ side computes in fp32, the reference in fp64), for each tensor:
//   max |cpp - ref| <= abs + rel * max|ref|, rel = 2e-5 (logits), 1e-5 (loss), 1e-4 (each
//   parameter's gradient), abs = 1e-6 (1e-7 for gradients).
// Measured: ~5e-7 (logits), ~6e-8 (loss), ~1.1e-6 (gradients) relative to max|ref| (fp32
// accumulation over hidden 64, 2 layers, 32 tokens; the test prints its figures). The bounds
// leave ~40-100x room for summation order while catching any wrong formula, which moves values
// by whole percents.
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

// Empty if /usr/bin/python3 can import torch, else why not.
std::string TorchUnavailableReason() {
  const std::string cmd = std::string(kPython) + " -c 'import torch, numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    return std::string(kPython) + " cannot import torch and numpy (apt-get install python3-torch)";
  }
  return "";
}

// A tiny Llama with grouped-query attention (4 query heads, 2 KV heads).
LlamaConfig TestConfig(bool tied) {
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 172;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  c.torch_dtype = DType::kFloat32;
  return c;
}

struct Variant {
  const char* name;
  bool tied;
  uint64_t max_shard_bytes;  // small: the reference reads a sharded checkpoint
};

class LlamaTorchTest : public ::testing::TestWithParam<Variant> {};

// |a - r| <= abs_tol + rel * max|r| for every element; reports the worst one.
// Returns the worst error relative to max|ref|.
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
  EXPECT_EQ(t->dtype_name, "F64");
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

TEST_P(LlamaTorchTest, LogitsLossAndGradientsMatchPyTorch) {
  const Variant& variant = GetParam();
  const LlamaConfig config = TestConfig(variant.tied);

  DeviceOptions dopt;
  auto device = CreateDevice(dopt);
  ASSERT_THAT(device, IsOk());
  LlamaModelOptions mopt;
  mopt.seed = 1234;
  mopt.init_std = 0.08;  // larger than 0.02 so the layers do more than pass the residual on
  auto model = LlamaForCausalLM::Create(config, device->get(), mopt);
  ASSERT_THAT(model, IsOk());
  auto stream = (*device)->CreateStream();
  ASSERT_THAT(stream, IsOk());
  const nn::RunContext ctx{device->get(), *stream, true};

  strata::testing::ScratchDir dir;
  const std::string model_dir = dir.File("model");
  LlamaSaveOptions save;
  save.max_shard_bytes = variant.max_shard_bytes;
  ASSERT_THAT(SaveLlamaForCausalLM(model_dir, **model, *stream, save), IsOk());

  // Two rows of 16 random byte ids; labels are the ids with a few ignored (-100).
  constexpr int64_t kB = 2, kT = 16;
  const auto random = strata::testing::RandomBytes(kB * kT, 99);
  std::vector<int32_t> ids(random.begin(), random.end()), labels = ids;
  labels[3] = labels[20] = labels[21] = -100;
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
  // Importing torch takes seconds: the script runs first, and only its failure asks why.
  if (std::system(cmd.c_str()) != 0) {
    const std::string why = TorchUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    std::ifstream err(dir.File("err.txt"));
    FAIL() << "reference failed: " << cmd << "\n"
           << std::string(std::istreambuf_iterator<char>(err), {});
  }
  auto ref = nn::SafetensorsFile::Open(out);
  ASSERT_THAT(ref, IsOk());

  // C++ forward and backward on the same tokens.
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
  std::printf("worst error / max|reference|: logits %.2e, loss %.2e, gradients %.2e\n", logits_err,
              loss_err, grad_err);
  EXPECT_EQ(compared, 2 + 9 * 2 + (variant.tied ? 0u : 1u));  // every parameter was compared
  EXPECT_THAT((*device)->DestroyStream(*stream), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Variants, LlamaTorchTest,
                         ::testing::Values(Variant{"untied", false, 5'000'000'000},
                                           Variant{"tied_sharded", true, 100'000}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::llama
