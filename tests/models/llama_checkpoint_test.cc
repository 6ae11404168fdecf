// Hugging Face checkpoints of LlamaForCausalLM: export and load back (bit for bit in fp32,
// rounded once in bf16), sharded, and the errors for missing, unexpected and misshapen tensors.
#include "models/llama/llama_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "nn/io/safetensors.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::llama {
namespace {

namespace fs = std::filesystem;
using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

LlamaConfig SmallConfig(bool tied) {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  c.torch_dtype = DType::kFloat32;
  return c;
}

class LlamaCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = CreateDevice(DeviceOptions{});
    ASSERT_THAT(d, IsOk());
    device_ = std::move(d).value();
    auto s = device_->CreateStream();
    ASSERT_THAT(s, IsOk());
    stream_ = *s;
  }
  void TearDown() override { EXPECT_THAT(device_->DestroyStream(stream_), IsOk()); }

  std::unique_ptr<LlamaForCausalLM> Make(bool tied, uint64_t seed) {
    LlamaModelOptions o;
    o.seed = seed;
    auto m = LlamaForCausalLM::Create(SmallConfig(tied), device_.get(), o);
    EXPECT_THAT(m, IsOk());
    return m.ok() ? std::move(m).value() : nullptr;
  }

  // name -> fp32 values of every parameter.
  std::map<std::string, std::vector<float>> Values(const LlamaForCausalLM& m) {
    std::map<std::string, std::vector<float>> v;
    for (nn::Parameter* p : m.NamedParameters()) {
      auto& x = v[p->name()];
      x.resize(static_cast<size_t>(p->numel()));
      EXPECT_THAT(nn::DownloadParameter(stream_, *p, x.data(), DType::kFloat32), IsOk());
    }
    return v;
  }

  // Rewrites the checkpoint in `from` into `to`, with `edit` applied to its tensor list.
  void Rewrite(const std::string& from, const std::string& to,
               const std::function<void(std::vector<nn::SafetensorsEntry>*)>& edit) {
    auto c = nn::SafetensorsCheckpoint::Open(from);
    ASSERT_THAT(c, IsOk());
    std::vector<nn::SafetensorsEntry> entries;
    for (const std::string& name : c->Names()) {
      auto t = c->Tensor(name);
      ASSERT_THAT(t, IsOk());
      entries.push_back({name, t->dtype, t->shape, t->data});
    }
    edit(&entries);
    fs::create_directories(to);
    fs::copy_file(fs::path(from) / "config.json", fs::path(to) / "config.json",
                  fs::copy_options::overwrite_existing);
    ASSERT_THAT(nn::WriteSafetensorsCheckpoint(to, entries, 1 << 30), IsOk());
  }

  std::unique_ptr<Device> device_;
  Stream stream_;
  ScratchDir dir_;
};

TEST_F(LlamaCheckpointTest, ExportsAndLoadsBackBitForBit) {
  for (bool tied : {false, true}) {
    auto m = Make(tied, 5);
    ASSERT_NE(m, nullptr);
    const std::string path = dir_.File(tied ? "tied" : "untied");
    ASSERT_THAT(SaveLlamaForCausalLM(path, *m, stream_), IsOk());
    // What transformers writes: config.json and one model.safetensors, F32, no tied duplicate.
    auto config = ReadLlamaConfig(path);
    ASSERT_THAT(config, IsOk());
    EXPECT_EQ(config->tie_word_embeddings, tied);
    auto file = nn::SafetensorsFile::Open(path + "/model.safetensors");
    ASSERT_THAT(file, IsOk());
    EXPECT_EQ(file->Contains("lm_head.weight"), !tied);
    EXPECT_EQ(file->metadata().at("format"), "pt");
    EXPECT_EQ(file->Tensor("model.layers.1.self_attn.k_proj.weight")->shape,
              (std::vector<int64_t>{16, 32}));  // kv_heads * head_dim, hidden

    auto loaded = LoadLlamaForCausalLM(path, device_.get());
    ASSERT_THAT(loaded, IsOk());
    EXPECT_EQ(Values(**loaded), Values(*m)) << (tied ? "tied" : "untied");
  }
}

TEST_F(LlamaCheckpointTest, ExportsBf16ShardsAndLoadsThemIntoFp32) {
  auto m = Make(false, 6);
  ASSERT_NE(m, nullptr);
  const std::string path = dir_.File("bf16");
  LlamaSaveOptions save;
  save.dtype = DType::kBFloat16;
  save.max_shard_bytes = 8 * 1024;
  ASSERT_THAT(SaveLlamaForCausalLM(path, *m, stream_, save), IsOk());
  EXPECT_TRUE(fs::exists(path + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(path + "/model.safetensors"));
  auto ckpt = nn::SafetensorsCheckpoint::Open(path);
  ASSERT_THAT(ckpt, IsOk());
  EXPECT_GT(ckpt->num_files(), 2u);
  EXPECT_EQ(ckpt->Tensor("model.norm.weight")->dtype, DType::kBFloat16);
  auto config = ReadLlamaConfig(path);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->torch_dtype, DType::kBFloat16);

  auto loaded = LoadLlamaForCausalLM(path, device_.get());
  ASSERT_THAT(loaded, IsOk());
  auto want = Values(*m);
  for (auto& [name, v] : want) {
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));  // rounded once, to nearest even
  }
  EXPECT_EQ(Values(**loaded), want);
}

TEST_F(LlamaCheckpointTest, NamesMissingUnexpectedAndMisshapenTensors) {
  auto m = Make(false, 7);
  ASSERT_NE(m, nullptr);
  const std::string good = dir_.File("good");
  ASSERT_THAT(SaveLlamaForCausalLM(good, *m, stream_), IsOk());
  const auto params = m->NamedParameters();

  const std::string missing = dir_.File("missing");
  Rewrite(good, missing, [](auto* e) {
    std::erase_if(*e, [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  EXPECT_THAT(LoadLlamaWeights(missing, params, false, stream_),
              StatusIs(StatusCode::kNotFound,
                       AllOf(HasSubstr(missing), HasSubstr("model.layers.1.mlp.up_proj.weight"))));

  const std::string extra = dir_.File("extra");
  const std::vector<float> bias(32);
  Rewrite(good, extra, [&](auto* e) {
    e->push_back({"model.layers.0.self_attn.q_proj.bias",
                  DType::kFloat32,
                  {32},
                  std::as_bytes(std::span(bias))});
    e->push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                  DType::kFloat32,
                  {32},
                  std::as_bytes(std::span(bias))});
  });
  EXPECT_THAT(LoadLlamaWeights(extra, params, false, stream_),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.layers.0.self_attn.q_proj.bias"),
                             ::testing::Not(HasSubstr("inv_freq")))));
  LlamaLoadOptions lenient;
  lenient.strict = false;
  EXPECT_THAT(LoadLlamaWeights(extra, params, false, stream_, lenient), IsOk());

  const std::string shape = dir_.File("shape");
  const std::vector<float> wide(64 * 33);
  Rewrite(good, shape, [&](auto* e) {
    for (auto& t : *e) {
      if (t.name == "model.embed_tokens.weight") {
        t.shape = {64, 33};
        t.data = std::as_bytes(std::span(wide));
      }
    }
  });
  EXPECT_THAT(
      LoadLlamaWeights(shape, params, false, stream_),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(HasSubstr("model.safetensors"), HasSubstr("'model.embed_tokens.weight'"),
                     HasSubstr("[64, 33]"), HasSubstr("[64, 32]"))));

  // A tied model ignores an lm_head.weight the file carries (as transformers does).
  auto tied = Make(true, 8);
  ASSERT_NE(tied, nullptr);
  EXPECT_THAT(LoadLlamaWeights(good, tied->NamedParameters(), true, stream_), IsOk());
  // An untied model needs it.
  const std::string no_head = dir_.File("no_head");
  Rewrite(good, no_head, [](auto* e) {
    std::erase_if(*e, [](const auto& t) { return t.name == "lm_head.weight"; });
  });
  EXPECT_THAT(LoadLlamaWeights(no_head, params, false, stream_),
              StatusIs(StatusCode::kNotFound, HasSubstr("lm_head.weight")));
}

TEST_F(LlamaCheckpointTest, RefusesAConfigItDoesNotImplement) {
  auto m = Make(false, 9);
  ASSERT_NE(m, nullptr);
  const std::string path = dir_.File("scaled");
  ASSERT_THAT(SaveLlamaForCausalLM(path, *m, stream_), IsOk());
  auto j = LlamaConfigJson(m->config());
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::ofstream(path + "/config.json") << j.dump(2);
  EXPECT_THAT(LoadLlamaForCausalLM(path, device_.get()),
              StatusIs(StatusCode::kUnimplemented,
                       AllOf(HasSubstr("config.json"), HasSubstr("'rope_scaling.rope_type'"),
                             HasSubstr("\"yarn\""))));
  EXPECT_THAT(LoadLlamaForCausalLM(dir_.File("absent"), device_.get()),
              StatusIs(StatusCode::kNotFound, HasSubstr("config.json")));
}

}  // namespace
}  // namespace strata::llama
