// The Llama-family configs people fine-tune today: Llama 3.x's rope_scaling (and the other RoPE
// types), MistralForCausalLM's sliding_window, the presets with the real models' shapes - parsed
// from config.json as the models publish it, refused naming the field and its value otherwise.
#include <string>
#include <vector>

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

// meta-llama/Llama-3.2-1B's config.json as published.
nlohmann::json Llama32Json() {
  return nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// mistralai/Mistral-7B-v0.1's config.json as published.
nlohmann::json MistralJson() {
  return nlohmann::json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": true, "vocab_size": 32000})");
}

TEST(LlamaFamiliesConfigTest, ParsesLlama32WithItsLlama3RopeScaling) {
  auto c = ParseLlamaConfig(Llama32Json(), "llama3.2/config.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->family, LlamaFamily::kLlama);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->sliding_window, 0);
  // Written back as transformers writes it, and read back the same.
  const nlohmann::json j = LlamaConfigJson(*c);
  EXPECT_EQ(j["rope_scaling"], Llama32Json()["rope_scaling"]);
  auto back = ParseLlamaConfig(nlohmann::json::parse(j.dump()), "back");
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(back->rope_scaling == c->rope_scaling);
  // The preset has the same shape and RoPE.
  auto preset = LlamaPreset("llama3.2-1b");
  ASSERT_THAT(preset, IsOk());
  EXPECT_TRUE(preset->rope_scaling == c->rope_scaling);
  EXPECT_EQ(preset->NumParameters(), c->NumParameters());
}

TEST(LlamaFamiliesConfigTest, ParsesLinearAndDynamicInBothSpellings) {
  auto j = Llama32Json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key
  auto c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4}};
  c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDynamic);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  // transformers >= 5: rope_parameters, with rope_theta inside.
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 3.0}, {"rope_theta", 1e6}};
  c = ParseLlamaConfig(j, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 3.0);
  EXPECT_EQ(c->rope_theta, 1e6);
}

// A rope_scaling Strata refuses, the code, and the words the error must hold.
struct RopeRefusal {
  const char* name;
  const char* key;  // rope_scaling or rope_parameters
  nlohmann::json value;
  StatusCode code;
  std::vector<std::string> words;
};

class RopeRefusalTest : public ::testing::TestWithParam<RopeRefusal> {};

TEST_P(RopeRefusalTest, NamesTheFieldAndTheValue) {
  const RopeRefusal& r = GetParam();
  auto j = Llama32Json();
  j.erase("rope_scaling");
  j[r.key] = r.value;
  const auto c = ParseLlamaConfig(j, "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status(), StatusIs(r.code, HasSubstr("/m/config.json")));
  for (const std::string& w : r.words) EXPECT_THAT(c.status().message(), HasSubstr(w));
}

INSTANTIATE_TEST_SUITE_P(
    Values, RopeRefusalTest,
    ::testing::Values(
        RopeRefusal{"yarn",
                    "rope_scaling",
                    {{"rope_type", "yarn"}, {"factor", 4.0}},
                    StatusCode::kUnimplemented,
                    {"'rope_scaling.rope_type'", "\"yarn\"", "llama3"}},
        RopeRefusal{"yarn_in_rope_parameters",
                    "rope_parameters",
                    {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1e6}},
                    StatusCode::kUnimplemented,
                    {"'rope_parameters.rope_type'", "\"yarn\""}},
        RopeRefusal{"longrope_older_key",
                    "rope_scaling",
                    {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {2.0}}},
                    StatusCode::kUnimplemented,
                    {"'rope_scaling.type'", "\"longrope\""}},
        RopeRefusal{"no_type",
                    "rope_scaling",
                    {{"factor", 2.0}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.type'", "absent"}},
        RopeRefusal{"factor_below_one",
                    "rope_scaling",
                    {{"rope_type", "linear"}, {"factor", 0.5}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.factor'", "0.5", ">= 1"}},
        RopeRefusal{"factor_not_a_number",
                    "rope_scaling",
                    {{"rope_type", "dynamic"}, {"factor", "2"}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.factor'", "\"2\""}},
        RopeRefusal{"factor_missing",
                    "rope_scaling",
                    {{"rope_type", "linear"}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.factor'", "required", "\"linear\""}},
        RopeRefusal{"llama3_without_low_freq_factor",
                    "rope_scaling",
                    {{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.low_freq_factor'", "required"}},
        RopeRefusal{"llama3_high_not_above_low",
                    "rope_scaling",
                    {{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"low_freq_factor", 4.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.high_freq_factor'", "low_freq_factor = 4.0"}},
        RopeRefusal{"llama3_fractional_context",
                    "rope_scaling",
                    {{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"low_freq_factor", 1.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192.5}},
                    StatusCode::kInvalidArgument,
                    {"'rope_scaling.original_max_position_embeddings'", "8192.5"}},
        RopeRefusal{"unknown_key",
                    "rope_scaling",
                    {{"rope_type", "linear"}, {"factor", 2.0}, {"attention_factor", 1.2}},
                    StatusCode::kUnimplemented,
                    {"'rope_scaling.attention_factor'", "1.2", "\"linear\""}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LlamaFamiliesConfigTest, RopeScalingAndRopeParametersMustAgree) {
  auto j = Llama32Json();
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(ParseLlamaConfig(j, "c.json"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'rope_parameters'"), HasSubstr("disagrees"))));
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_THAT(ParseLlamaConfig(j, "c.json"), IsOk());
}

TEST(LlamaFamiliesConfigTest, ParsesMistralWithItsSlidingWindow) {
  auto c = ParseLlamaConfig(MistralJson(), "mistral/config.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->family, LlamaFamily::kMistral);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->NumParameters(), 7'241'732'096);  // Mistral-7B-v0.1's published count
  const nlohmann::json j = LlamaConfigJson(*c);
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"MistralForCausalLM"}));
  EXPECT_EQ(j["model_type"], "mistral");
  EXPECT_EQ(j["sliding_window"], 4096);
  EXPECT_FALSE(j.contains("attention_bias"));  // not a MistralConfig field
  auto back = ParseLlamaConfig(nlohmann::json::parse(j.dump()), "back");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->family, LlamaFamily::kMistral);
  EXPECT_EQ(back->sliding_window, 4096);

  auto no_window = MistralJson();
  no_window["sliding_window"] = nullptr;  // Mistral-7B-v0.2 and later
  no_window.erase("architectures");       // model_type alone names the family
  c = ParseLlamaConfig(no_window, "m.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->family, LlamaFamily::kMistral);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_TRUE(LlamaConfigJson(*c)["sliding_window"].is_null());
}

TEST(LlamaFamiliesConfigTest, RefusesABadSlidingWindowAndMismatchedFamilies) {
  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json(-4), nlohmann::json("4096"), nlohmann::json(10.5)}) {
    auto j = MistralJson();
    j["sliding_window"] = bad;
    EXPECT_THAT(ParseLlamaConfig(j, "/m/config.json"),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("/m/config.json"), HasSubstr("'sliding_window'"),
                               HasSubstr(bad.dump()))));
  }
  auto j = MistralJson();
  j["model_type"] = "llama";
  EXPECT_THAT(ParseLlamaConfig(j, "c.json"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'model_type'"), HasSubstr("MistralForCausalLM"),
                             HasSubstr("\"mistral\""))));
  j = MistralJson();
  j["architectures"] = {"Qwen9ForCausalLM"};
  EXPECT_THAT(ParseLlamaConfig(j, "c.json"),
              StatusIs(StatusCode::kUnimplemented,
                       AllOf(HasSubstr("Qwen9ForCausalLM"), HasSubstr("MistralForCausalLM"),
                             HasSubstr("LlamaForCausalLM"))));
  // A Llama does not read sliding_window (transformers' LlamaForCausalLM ignores it too).
  auto llama = Llama32Json();
  llama["sliding_window"] = 4096;
  auto c = ParseLlamaConfig(llama, "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->sliding_window, 0);
}

// The published parameter counts of the models the presets copy.
TEST(LlamaFamiliesConfigTest, PresetsHaveTheRealModelsShapes) {
  struct Expect {
    const char* name;
    int64_t params, hidden, layers, heads, kv_heads;
    RopeType rope;
    double factor;
    bool tied;
    int64_t window;
  };
  for (const Expect& e : {
           Expect{"llama3.2-1b", 1'235'814'400, 2048, 16, 32, 8, RopeType::kLlama3, 32.0, true, 0},
           Expect{"llama3.2-3b", 3'212'749'824, 3072, 28, 24, 8, RopeType::kLlama3, 32.0, true, 0},
           Expect{"llama3.1-8b", 8'030'261'248, 4096, 32, 32, 8, RopeType::kLlama3, 8.0, false, 0},
           Expect{"mistral-7b", 7'241'732'096, 4096, 32, 32, 8, RopeType::kDefault, 1.0, false,
                  4096},
       }) {
    auto c = LlamaPreset(e.name);
    ASSERT_THAT(c, IsOk()) << e.name;
    EXPECT_EQ(c->NumParameters(), e.params) << e.name;
    EXPECT_EQ(c->hidden_size, e.hidden) << e.name;
    EXPECT_EQ(c->num_hidden_layers, e.layers) << e.name;
    EXPECT_EQ(c->num_attention_heads, e.heads) << e.name;
    EXPECT_EQ(c->num_key_value_heads, e.kv_heads) << e.name;
    EXPECT_EQ(c->rope_scaling.type, e.rope) << e.name;
    EXPECT_EQ(c->rope_scaling.factor, e.factor) << e.name;
    EXPECT_EQ(c->tie_word_embeddings, e.tied) << e.name;
    EXPECT_EQ(c->sliding_window, e.window) << e.name;
    // Every preset writes a config.json that reads back to itself.
    auto back = ParseLlamaConfig(nlohmann::json::parse(LlamaConfigJson(*c).dump()), e.name);
    ASSERT_THAT(back, IsOk()) << e.name;
    EXPECT_EQ(back->family, c->family) << e.name;
    EXPECT_TRUE(back->rope_scaling == c->rope_scaling) << e.name;
    EXPECT_EQ(back->rope_theta, c->rope_theta) << e.name;
    EXPECT_EQ(back->sliding_window, c->sliding_window) << e.name;
    EXPECT_EQ(back->NumParameters(), c->NumParameters()) << e.name;
  }
}

TEST(LlamaFamiliesConfigTest, UnknownPresetListsEveryName) {
  const auto c = LlamaPreset("llama4");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'llama4'"));
  for (const char* name :
       {"tiny", "small", "1b", "7b", "llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "mistral-7b"}) {
    EXPECT_THAT(c.status().message(), HasSubstr(name));
  }
}

}  // namespace
}  // namespace strata::llama
