// LlamaConfig: config.json parsing as transformers writes it, refusals naming the field, presets
// and their parameter counts against a count made here from the tensor list.
#include "models/llama/config/llama_config.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// TinyLlama-1.1B-Chat-v1.0's config.json as published.
nlohmann::json TinyLlamaJson() {
  return nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.35.0",
    "use_cache": true, "vocab_size": 32000})");
}

TEST(LlamaConfigTest, ParsesAPublishedConfig) {
  auto c = ParseLlamaConfig(TinyLlamaJson(), "tinyllama/config.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->intermediate_size, 5632);
  EXPECT_EQ(c->num_hidden_layers, 22);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, DType::kBFloat16);
  EXPECT_EQ(c->head_dim(), 64);
}

TEST(LlamaConfigTest, UsesTransformersDefaultsForAbsentFields) {
  auto c = ParseLlamaConfig(nlohmann::json::object({{"num_attention_heads", 8}}), "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->num_key_value_heads, 8);  // defaults to num_attention_heads
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_EQ(c->torch_dtype, DType::kFloat32);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(LlamaConfigTest, AcceptsTheNewerSpellingsOfPlainRopeAndDType) {
  auto j = TinyLlamaJson();
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_scaling"] = {{"rope_type", "default"}};
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  j["head_dim"] = 64;
  auto c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->torch_dtype, DType::kFloat16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
}

// A field set to something Strata does not implement, and the words the refusal must contain.
struct Refusal {
  const char* name;
  const char* field;
  nlohmann::json value;
  StatusCode code;
  const char* words;
};

class LlamaConfigRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(LlamaConfigRefusalTest, NamesTheField) {
  const Refusal& r = GetParam();
  auto j = TinyLlamaJson();
  j[r.field] = r.value;
  EXPECT_THAT(
      ParseLlamaConfig(j, "/m/config.json"),
      StatusIs(r.code, AllOf(HasSubstr("/m/config.json"),
                             HasSubstr(std::string("'") + r.field + "'"), HasSubstr(r.words))));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, LlamaConfigRefusalTest,
    ::testing::Values(
        Refusal{"other_architecture",
                "architectures",
                {"GPTNeoXForCausalLM"},
                StatusCode::kUnimplemented,
                "LlamaForCausalLM"},
        Refusal{"model_type", "model_type", "gpt_neox", StatusCode::kUnimplemented, "\"llama\""},
        Refusal{"rope_scaling_not_object", "rope_scaling", 2.0, StatusCode::kInvalidArgument,
                "object or null"},
        Refusal{"attention_bias", "attention_bias", true, StatusCode::kUnimplemented, "false"},
        Refusal{"mlp_bias", "mlp_bias", true, StatusCode::kUnimplemented, "false"},
        Refusal{"hidden_act", "hidden_act", "gelu", StatusCode::kUnimplemented, "silu"},
        Refusal{"head_dim", "head_dim", 0, StatusCode::kInvalidArgument, "positive"},
        Refusal{"torch_dtype", "torch_dtype", "float64", StatusCode::kUnimplemented, "bfloat16"},
        Refusal{"attention_dropout", "attention_dropout", 0.1, StatusCode::kUnimplemented, "0.0"},
        Refusal{"kv_heads_not_dividing", "num_key_value_heads", 5, StatusCode::kInvalidArgument,
                "does not divide num_attention_heads = 32"},
        Refusal{"heads_not_dividing_hidden", "num_attention_heads", 30,
                StatusCode::kInvalidArgument, "does not divide hidden_size = 2048"},
        Refusal{"negative_size", "hidden_size", -4, StatusCode::kInvalidArgument, "positive"},
        Refusal{"string_size", "vocab_size", "32000", StatusCode::kInvalidArgument, "positive"},
        Refusal{"zero_eps", "rms_norm_eps", 0, StatusCode::kInvalidArgument, "positive"},
        Refusal{"tie_not_bool", "tie_word_embeddings", 1, StatusCode::kInvalidArgument, "boolean"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaConfigTest, ConfigJsonRoundTripsThroughTheParser) {
  for (const char* preset : {"tiny", "small", "1b", "7b"}) {
    auto c = LlamaPreset(preset);
    ASSERT_THAT(c, IsOk());
    c->tie_word_embeddings = std::string(preset) == "tiny";
    const nlohmann::json j = LlamaConfigJson(*c);
    EXPECT_EQ(j["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_TRUE(j["rope_scaling"].is_null());
    auto back = ParseLlamaConfig(nlohmann::json::parse(j.dump()), preset);
    ASSERT_THAT(back, IsOk()) << preset;
    EXPECT_EQ(back->hidden_size, c->hidden_size);
    EXPECT_EQ(back->intermediate_size, c->intermediate_size);
    EXPECT_EQ(back->num_hidden_layers, c->num_hidden_layers);
    EXPECT_EQ(back->num_attention_heads, c->num_attention_heads);
    EXPECT_EQ(back->num_key_value_heads, c->num_key_value_heads);
    EXPECT_EQ(back->vocab_size, c->vocab_size);
    EXPECT_EQ(back->max_position_embeddings, c->max_position_embeddings);
    EXPECT_EQ(back->rms_norm_eps, c->rms_norm_eps);
    EXPECT_EQ(back->rope_theta, c->rope_theta);
    EXPECT_EQ(back->tie_word_embeddings, c->tie_word_embeddings);
    EXPECT_EQ(back->torch_dtype, c->torch_dtype);
  }
}

TEST(LlamaConfigTest, ReadsConfigJsonFromADirectory) {
  strata::testing::ScratchDir dir;
  EXPECT_THAT(ReadLlamaConfig(dir.path().string()),
              StatusIs(StatusCode::kNotFound, HasSubstr("config.json")));
  std::ofstream(dir.File("config.json")) << "{not json";
  EXPECT_THAT(ReadLlamaConfig(dir.path().string()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  std::ofstream(dir.File("config.json")) << TinyLlamaJson().dump(2);
  auto c = ReadLlamaConfig(dir.path().string());
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->num_key_value_heads, 4);
}

// Parameter count from the list of Hugging Face tensors and their shapes, written out here.
int64_t CountFromTensorList(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, hd = h / c.num_attention_heads;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{c.vocab_size, h}};  // embed_tokens
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    shapes.push_back({c.num_attention_heads * hd, h});  // q_proj
    shapes.push_back({c.num_key_value_heads * hd, h});  // k_proj
    shapes.push_back({c.num_key_value_heads * hd, h});  // v_proj
    shapes.push_back({h, c.num_attention_heads * hd});  // o_proj
    shapes.push_back({c.intermediate_size, h});         // gate_proj
    shapes.push_back({c.intermediate_size, h});         // up_proj
    shapes.push_back({h, c.intermediate_size});         // down_proj
    shapes.push_back({h, 1});                           // input_layernorm
    shapes.push_back({h, 1});                           // post_attention_layernorm
  }
  shapes.push_back({h, 1});                                         // model.norm
  if (!c.tie_word_embeddings) shapes.push_back({c.vocab_size, h});  // lm_head
  int64_t n = 0;
  for (auto [a, b] : shapes) n += a * b;
  return n;
}

TEST(LlamaConfigTest, PresetsHaveTheirDocumentedShapesAndCounts) {
  auto tiny = LlamaPreset("tiny");
  auto small = LlamaPreset("small");
  auto b1 = LlamaPreset("1b");
  auto b7 = LlamaPreset("7b");
  ASSERT_THAT(tiny, IsOk());
  ASSERT_THAT(small, IsOk());
  ASSERT_THAT(b1, IsOk());
  ASSERT_THAT(b7, IsOk());
  for (const LlamaConfig* c : {&*tiny, &*small, &*b1, &*b7}) {
    EXPECT_EQ(c->NumParameters(), CountFromTensorList(*c));
    LlamaConfig tied = *c;
    tied.tie_word_embeddings = true;
    EXPECT_EQ(tied.NumParameters(), CountFromTensorList(tied));
  }
  // tiny: ~1M with grouped-query attention; small: ~20M; both byte-level.
  EXPECT_LT(tiny->num_key_value_heads, tiny->num_attention_heads);
  EXPECT_GT(tiny->NumParameters(), 500'000);
  EXPECT_LT(tiny->NumParameters(), 1'500'000);
  EXPECT_EQ(tiny->vocab_size, 256);
  EXPECT_EQ(tiny->NumParameters(), 853'120);  // as docs/models.md says
  EXPECT_GT(small->NumParameters(), 15'000'000);
  EXPECT_LT(small->NumParameters(), 25'000'000);
  EXPECT_EQ(small->vocab_size, 256);
  EXPECT_EQ(small->NumParameters(), 19'143'168);
  // TinyLlama-1.1B and Llama-2-7B: their published parameter counts.
  EXPECT_EQ(b1->NumParameters(), 1'100'048'384);
  EXPECT_EQ(b7->NumParameters(), 6'738'415'616);
  EXPECT_EQ(b1->num_key_value_heads, 4);
  EXPECT_EQ(b7->num_key_value_heads, 32);
  EXPECT_THAT(LlamaPreset("13b"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'13b'"), HasSubstr("tiny, small, 1b, 7b"))));
}

}  // namespace
}  // namespace strata::llama
