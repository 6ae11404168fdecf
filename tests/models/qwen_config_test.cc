// Qwen2 / Qwen2.5 and Qwen3 config.json as published (Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B): the
// family switches, explicit head_dim, refusals naming the field and its value, the presets'
// parameter counts against the totals of the published checkpoints, and the config.json written
// for a Qwen config reading back the same.
#include "models/llama/config/qwen_config.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/llama/config/llama_config.h"
#include "tests/support/status_matchers.h"

namespace strata::llama {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Qwen/Qwen2.5-0.5B's config.json as published.
nlohmann::json Qwen25Json() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

// Qwen/Qwen3-0.6B's config.json as published.
nlohmann::json Qwen3Json() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(QwenConfigTest, ParsesQwen25AsPublished) {
  auto c = ParseLlamaConfig(Qwen25Json(), "qwen2.5/config.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->qwen_version(), 2);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->torch_dtype, DType::kBFloat16);
  // The published checkpoint's total (its safetensors hold 494,032,768 values, embedding tied).
  EXPECT_EQ(c->NumParameters(), 494'032'768);
}

TEST(QwenConfigTest, ParsesQwen3AsPublished) {
  auto c = ParseLlamaConfig(Qwen3Json(), "qwen3/config.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->qwen_version(), 3);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->head_dim(), 128);  // not 1024 / 16
  EXPECT_EQ(c->max_position_embeddings, 40960);
  EXPECT_EQ(c->NumParameters(), 596'049'920);
}

TEST(QwenConfigTest, Qwen3HeadDimDefaultsTo128AsTransformers) {
  auto j = Qwen3Json();
  j.erase("head_dim");
  auto c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->head_dim(), 128);
}

TEST(QwenConfigTest, ModelTypeAloneNamesTheFamily) {
  auto j = Qwen25Json();
  j.erase("architectures");
  auto c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->qwen_version(), 2);
}

struct Refusal {
  const char* name;
  bool qwen3;
  const char* field;
  nlohmann::json value;
  StatusCode code;
  const char* words;  // besides the field name and its value
};

class QwenConfigRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(QwenConfigRefusalTest, NamesTheFieldAndItsValue) {
  const Refusal& r = GetParam();
  auto j = r.qwen3 ? Qwen3Json() : Qwen25Json();
  j[r.field] = r.value;
  EXPECT_THAT(ParseLlamaConfig(j, "/q/config.json"),
              StatusIs(r.code, AllOf(HasSubstr("/q/config.json"),
                                     HasSubstr(std::string("'") + r.field + "'"),
                                     HasSubstr(r.value.dump()), HasSubstr(r.words))));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, QwenConfigRefusalTest,
    ::testing::Values(Refusal{"qwen2_sliding_window", false, "use_sliding_window", true,
                              StatusCode::kUnimplemented, "full causal attention"},
                      Refusal{"qwen3_sliding_window", true, "use_sliding_window", true,
                              StatusCode::kUnimplemented, "full causal attention"},
                      Refusal{"sliding_window_not_bool", false, "use_sliding_window", "no",
                              StatusCode::kInvalidArgument, "boolean"},
                      Refusal{"qwen3_attention_bias", true, "attention_bias", true,
                              StatusCode::kUnimplemented, "false"},
                      Refusal{"qwen3_layer_types",
                              true,
                              "layer_types",
                              {"full_attention", "sliding_attention"},
                              StatusCode::kUnimplemented,
                              "full_attention"},
                      Refusal{"qwen3_head_dim", true, "head_dim", -128,
                              StatusCode::kInvalidArgument, "positive"},
                      Refusal{"family_mismatch", false, "model_type", "qwen3",
                              StatusCode::kInvalidArgument, "architectures"},
                      Refusal{"other_model_type", false, "model_type", "qwen2_moe",
                              StatusCode::kUnimplemented, "\"qwen2\", \"qwen3\""},
                      Refusal{"two_architectures",
                              false,
                              "architectures",
                              {"Qwen2ForCausalLM", "LlamaForCausalLM"},
                              StatusCode::kUnimplemented,
                              "[\"Qwen2ForCausalLM\"]"}),
    [](const auto& info) { return std::string(info.param.name); });

// The RoPE types are the Llama family's (llama_rope.h): yarn is refused naming the type's field.
TEST(QwenConfigTest, YarnRopeScalingIsRefusedNamingTheTypeAndItsValue) {
  auto j = Qwen3Json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(ParseLlamaConfig(j, "/q/config.json"),
              StatusIs(StatusCode::kUnimplemented,
                       AllOf(HasSubstr("/q/config.json"), HasSubstr("'rope_scaling.rope_type'"),
                             HasSubstr("\"yarn\""), HasSubstr("llama3"))));
}

TEST(QwenConfigTest, PresetsHaveThePublishedShapes) {
  struct Want {
    const char* name;
    int qwen;
    int64_t hidden, inter, layers, heads, kv_heads, head_dim, params;
  };
  for (const Want& w : {Want{"qwen2.5-0.5b", 2, 896, 4864, 24, 14, 2, 64, 494'032'768},
                        Want{"qwen3-0.6b", 3, 1024, 3072, 28, 16, 8, 128, 596'049'920},
                        Want{"qwen3-4b", 3, 2560, 9728, 36, 32, 8, 128, 4'022'468'096}}) {
    auto c = LlamaPreset(w.name);
    ASSERT_THAT(c, IsOk()) << w.name;
    EXPECT_EQ(c->vocab_size, 151936) << w.name;
    EXPECT_EQ(c->qwen_version(), w.qwen) << w.name;
    EXPECT_EQ(c->qkv_bias, w.qwen == 2) << w.name;
    EXPECT_EQ(c->qk_norm, w.qwen == 3) << w.name;
    EXPECT_EQ(c->hidden_size, w.hidden) << w.name;
    EXPECT_EQ(c->intermediate_size, w.inter) << w.name;
    EXPECT_EQ(c->num_hidden_layers, w.layers) << w.name;
    EXPECT_EQ(c->num_attention_heads, w.heads) << w.name;
    EXPECT_EQ(c->num_key_value_heads, w.kv_heads) << w.name;
    EXPECT_EQ(c->head_dim(), w.head_dim) << w.name;
    EXPECT_TRUE(c->tie_word_embeddings) << w.name;
    EXPECT_DOUBLE_EQ(c->rope_theta, 1e6) << w.name;
    // The totals of the published checkpoints (Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B, -4B).
    EXPECT_EQ(c->NumParameters(), w.params) << w.name;
  }
  EXPECT_THAT(LlamaPreset("qwen3-8b"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("qwen3-0.6b")));
}

TEST(QwenConfigTest, WrittenConfigJsonIsTheFamilysAndReadsBack) {
  for (const char* preset : {"qwen2.5-0.5b", "qwen3-4b"}) {
    auto c = LlamaPreset(preset);
    ASSERT_THAT(c, IsOk());
    const nlohmann::json j = LlamaConfigJson(*c);
    const bool v3 = c->qwen_version() == 3;
    EXPECT_EQ(j["architectures"][0], v3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM") << preset;
    EXPECT_EQ(j["model_type"], v3 ? "qwen3" : "qwen2") << preset;
    EXPECT_EQ(j["use_sliding_window"], false) << preset;
    EXPECT_FALSE(j.contains("mlp_bias")) << preset;
    if (v3) {
      EXPECT_EQ(j["head_dim"], 128) << preset;
    }
    auto back = ParseLlamaConfig(nlohmann::json::parse(j.dump()), preset);
    ASSERT_THAT(back, IsOk()) << preset;
    EXPECT_EQ(back->qwen_version(), c->qwen_version()) << preset;
    EXPECT_EQ(back->qkv_bias, c->qkv_bias) << preset;
    EXPECT_EQ(back->qk_norm, c->qk_norm) << preset;
    EXPECT_EQ(back->head_dim(), c->head_dim()) << preset;
    EXPECT_EQ(back->NumParameters(), c->NumParameters()) << preset;
    EXPECT_EQ(back->torch_dtype, DType::kBFloat16) << preset;
  }
}

}  // namespace
}  // namespace strata::llama
