// ZeRO-Inference: the same generation with the weights placed by offload_param — stage 3 on the
// device, in pinned CPU memory, on NVMe with nothing kept in CPU memory (max_in_cpu 0) — each
// against the float64 PyTorch reference without a KV cache (the logits of the prompts' last
// tokens and of every decode step, fed the reference's tokens; greedy continuations token for
// token). Also: the device holds only a few modules' weights at once (the coordinator's live
// bound), every forward reads the weights from NVMe, and the coordinator's prefetch hits. Two
// more families on NVMe: Mistral with a sliding_window (3) shorter than the prompt and the
// generation, and Qwen3 (q_norm / k_norm, head_dim 24 != 64 / 4, tied embeddings).
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

#include "engine/config/config.h"
#include "engine/zero_inference.h"
#include "models/infer/generator.h"
#include "models/llama/llama_checkpoint.h"
#include "models/llama/model/llama_decode.h"
#include "nn/io/safetensors.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int64_t kSteps = 5;

llama::LlamaConfig TestConfig(llama::LlamaFamily family) {
  llama::LlamaConfig c;
  c.family = family;
  if (family == llama::LlamaFamily::kMistral) c.sliding_window = 3;
  if (family == llama::LlamaFamily::kQwen3) {
    c.qk_norm = true;
    c.explicit_head_dim = 24;
    c.tie_word_embeddings = true;
  }
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = DType::kFloat32;
  return c;
}

std::vector<std::vector<int32_t>> Prompts() { return {{5, 17, 42, 8, 91, 3, 60}, {70, 2}}; }

std::vector<double> ReadF64(const nn::SafetensorsFile& f, const std::string& name) {
  auto t = f.RawTensor(name);
  EXPECT_THAT(t, IsOk());
  if (!t.ok()) return {};
  std::vector<double> v(t->data.size() / 8);
  std::memcpy(v.data(), t->data.data(), v.size() * 8);
  return v;
}

struct Placement {
  const char* name;
  const char* offload;  // offload_param.device
  llama::LlamaFamily family = llama::LlamaFamily::kLlama;
};

void PrintTo(const Placement& p, std::ostream* os) { *os << p.name; }

class ZeroInferenceTorchTest : public ::testing::TestWithParam<Placement> {};

TEST_P(ZeroInferenceTorchTest, LogitsAndGreedyTokensMatchTheUncachedReference) {
  strata::testing::ScratchDir dir;
  const llama::LlamaConfig mc = TestConfig(GetParam().family);
  // The weights: a randomly initialised model saved as a Hugging Face directory.
  std::string model_dir = dir.File("model");
  {
    auto device = CreateDevice(DeviceOptions{});
    ASSERT_THAT(device, IsOk());
    llama::LlamaModelOptions mo;
    mo.seed = 5, mo.init_std = 0.15, mo.allocate_grads = false;
    auto m = llama::LlamaForCausalLM::Create(mc, device->get(), mo);
    ASSERT_THAT(m, IsOk());
    auto s = (*device)->CreateStream();
    ASSERT_THAT(s, IsOk());
    ASSERT_THAT(llama::SaveLlamaForCausalLM(model_dir, **m, *s), IsOk());
    ASSERT_THAT((*device)->DestroyStream(*s), IsOk());
  }
  std::ofstream(dir.File("prompts.json"))
      << nlohmann::json{{"prompts", Prompts()}, {"steps", kSteps}}.dump();
  const std::string out = dir.File("reference.safetensors");
  const std::string cmd = std::string(kPython) + " " + STRATA_SOURCE_DIR +
                          "/tests/models/torch_llama_generate_reference.py " + model_dir + " " +
                          dir.File("prompts.json") + " " + out + " 2>" + dir.File("err.txt");
  if (std::system(cmd.c_str()) != 0) {
    if (std::system((std::string(kPython) + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
      GTEST_SKIP() << kPython << " cannot import torch (apt-get install python3-torch)";
    }
    std::ifstream err(dir.File("err.txt"));
    FAIL() << cmd << "\n" << std::string(std::istreambuf_iterator<char>(err), {});
  }
  auto ref = nn::SafetensorsFile::Open(out);
  ASSERT_THAT(ref, IsOk());

  // The placement: stage 3 with offload_param as the parameter says; small persistence and live
  // bounds so the 4 layers stream (a layer is ~45k elements, the norms 64 stay).
  nlohmann::json cfg = {{"train_batch_size", 1},
                        {"zero_optimization",
                         {{"stage", 3},
                          {"offload_param",
                           {{"device", GetParam().offload},
                            {"nvme_path", dir.File("swap")},
                            {"max_in_cpu", 0},
                            {"buffer_count", 8},
                            {"buffer_size", 20000}}},
                          {"stage3_param_persistence_threshold", 100},
                          {"stage3_max_live_parameters", 60000},
                          {"stage3_prefetch_bucket_size", 30000}}}};
  if (std::string(GetParam().offload) != "nvme")
    cfg["zero_optimization"]["offload_param"] = {{"device", GetParam().offload}};
  auto config = LoadConfigText(cfg.dump(), "test", RunContext{});
  ASSERT_THAT(config, IsOk());
  auto device = CreateDevice(DeviceOptions{});
  ASSERT_THAT(device, IsOk());
  auto stream = (*device)->CreateStream();
  ASSERT_THAT(stream, IsOk());
  llama::LlamaModelOptions mo;
  mo.allocate_parameters = false, mo.allocate_grads = false;
  auto model = llama::LlamaForCausalLM::Create(mc, device->get(), mo);
  ASSERT_THAT(model, IsOk());
  auto ckpt = nn::SafetensorsCheckpoint::Open(model_dir);
  ASSERT_THAT(ckpt, IsOk());
  ParamInitFn init = [&](const nn::Parameter& p, std::span<float> v) -> Status {
    STRATA_ASSIGN_OR_RETURN(nn::SafetensorView view, ckpt->Tensor(p.name()));
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape().ndim(); ++i) shape.push_back(p.shape()[i]);
    return nn::ConvertSafetensor(view, shape, DType::kFloat32, std::as_writable_bytes(v));
  };
  auto zi = ZeroInference::Create(**model, (*model)->NamedParameters(), *config, **device, *stream,
                                  DType::kFloat32, init);
  ASSERT_THAT(zi, IsOk());
  auto dec = llama::LlamaDecoder::Create(model->get(), 2, 7 + kSteps + 1);
  ASSERT_THAT(dec, IsOk());
  ZeroInference* z = zi->get();
  (*dec)->set_on_pass_end([z]() { return z->FinishForward(); });
  const nn::RunContext ctx{device->get(), *stream, false};

  std::vector<std::vector<int32_t>> ref_tokens(2);
  std::vector<std::vector<double>> ref_logits(2);
  for (size_t b = 0; b < 2; ++b) {
    ref_logits[b] = ReadF64(*ref, "logits." + std::to_string(b));
    for (double t : ReadF64(*ref, "tokens." + std::to_string(b))) {
      ref_tokens[b].push_back(static_cast<int32_t>(t));
    }
  }
  const size_t vocab = static_cast<size_t>(mc.vocab_size);
  std::vector<float> logits;
  ASSERT_THAT((*dec)->Prefill(ctx, Prompts(), &logits), IsOk());
  const uint64_t read_after_prefill = (*zi)->stats().nvme_read_bytes;
  double worst = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    std::vector<int32_t> feed;
    for (size_t b = 0; b < 2; ++b) {
      const double* r = ref_logits[b].data() + static_cast<size_t>(step) * vocab;
      double scale = 0, err = 0;
      for (size_t i = 0; i < vocab; ++i) scale = std::max(scale, std::abs(r[i]));
      for (size_t i = 0; i < vocab; ++i)
        err = std::max(err, std::abs(logits[b * vocab + i] - r[i]));
      EXPECT_LE(err, 1e-6 + 2e-5 * scale) << "sequence " << b << " step " << step;
      worst = std::max(worst, err / scale);
      feed.push_back(ref_tokens[b][static_cast<size_t>(step)]);
    }
    if (step < kSteps) {
      ASSERT_THAT((*dec)->Decode(ctx, feed, &logits), IsOk());
    }
  }
  infer::GenerateOptions go;
  go.max_new_tokens = kSteps + 1;
  auto r = infer::Generate(**dec, ctx, Prompts(), go);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->tokens, ref_tokens);

  const ZeroInferenceStats s = (*zi)->stats();
  std::printf(
      "%s: worst logits error / max|ref| %.2e; weights %llu B, peak gathered %llu B, "
      "NVMe read %llu B, prefetch hits %llu misses %llu\n",
      GetParam().name, worst, static_cast<unsigned long long>(s.weight_bytes),
      static_cast<unsigned long long>(s.peak_live_bytes),
      static_cast<unsigned long long>(s.nvme_read_bytes),
      static_cast<unsigned long long>(s.prefetch_hits),
      static_cast<unsigned long long>(s.prefetch_misses));
  // Only a few modules' weights on the device at once: the live bound (60k elements) and one
  // module, not the model's ~200k.
  EXPECT_LT(s.peak_live_bytes, s.weight_bytes / 2);
  EXPECT_GT(s.prefetch_hits, 0u) << "the coordinator gathers ahead from the second forward on";
  if (std::string(GetParam().offload) == "nvme") {
    // Every forward reads the streamed weights (all but the persistent ones: the norms) from NVMe.
    uint64_t norms = 0;
    for (const nn::Parameter* p : (*model)->NamedParameters()) {
      if (p->numel() <= 100) norms += static_cast<uint64_t>(p->numel()) * 4;
    }
    EXPECT_EQ(norms, (2 * 4 + 1) * 64 * 4 + (mc.qk_norm ? 2 * 4 * 24 * 4 : 0));
    EXPECT_GE(read_after_prefill, s.weight_bytes - norms);
    EXPECT_GE(s.nvme_read_bytes, (1 + kSteps + 1 + kSteps) * (s.weight_bytes - norms));
  } else {
    EXPECT_EQ(s.nvme_read_bytes, 0u);
  }
  dec->reset();
  zi->reset();
  EXPECT_THAT((*device)->DestroyStream(*stream), IsOk());
}

INSTANTIATE_TEST_SUITE_P(
    Placements, ZeroInferenceTorchTest,
    ::testing::Values(Placement{"device", "none"}, Placement{"cpu", "cpu"},
                      Placement{"nvme", "nvme"},
                      Placement{"nvme_mistral", "nvme", llama::LlamaFamily::kMistral},
                      Placement{"nvme_qwen3", "nvme", llama::LlamaFamily::kQwen3}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
