// Pipeline parts the npm reference files do not use, on small hand-made tokenizer.json files with
// results worked out by hand: Metaspace (prepend schemes, split) and its decoder, ByteLevel with
// GPT-2's regex and a prefix space, Split behaviours; and one Tokenizer shared by two threads.
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"
#include "tokenizers/tokenizer.h"

namespace strata::tokenizers {
namespace {

using ::strata::testing::IsOk;
using ::testing::ElementsAre;
using Json = nlohmann::json;

// "▁" 0, H 1, i 2, ▁H 3, ▁Hi 4, t 5, ▁t 6, <unk> 7; added <s> 8. Metaspace pre-tokenizer.
Json MetaspaceFile(const char* scheme) {
  Json j = Json::parse(R"({
    "added_tokens": [{"id": 8, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "split": true},
    "post_processor": null,
    "decoder": {"type": "Metaspace", "replacement": "\u2581"},
    "model": {"type": "BPE", "unk_token": "<unk>",
      "vocab": {"\u2581": 0, "H": 1, "i": 2, "\u2581H": 3, "\u2581Hi": 4, "t": 5, "\u2581t": 6,
                "<unk>": 7},
      "merges": ["\u2581 H", "\u2581H i", "\u2581 t"]}})");
  j["pre_tokenizer"]["prepend_scheme"] = scheme;
  j["decoder"]["prepend_scheme"] = scheme;
  return j;
}

class TokenizerPipelineTest : public ::testing::Test {
 protected:
  Result<Tokenizer> Load(const Json& j) {
    const std::string path = dir_.File("tokenizer.json");
    std::ofstream(path) << j.dump();
    return Tokenizer::FromFile(path);
  }
  strata::testing::ScratchDir dir_;
};

TEST_F(TokenizerPipelineTest, MetaspaceReplacesSpacesPrependsAndSplitsBeforeEach) {
  auto tok = Load(MetaspaceFile("first"));
  ASSERT_THAT(tok, IsOk());
  // "Hi  t" -> "▁Hi▁▁t" -> "▁Hi" | "▁" | "▁t".
  EXPECT_THAT(*tok->Encode("Hi  t"), ElementsAre(4, 0, 6));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{4, 0, 6}), "Hi  t");
  // "first": only the stretch that starts the text gets the prefix, not the one after <s>.
  EXPECT_THAT(*tok->Encode("Hi<s>t"), ElementsAre(4, 8, 5));
  auto always = Load(MetaspaceFile("always"));
  ASSERT_THAT(always, IsOk());
  EXPECT_THAT(*always->Encode("Hi<s>t"), ElementsAre(4, 8, 6));
  auto never = Load(MetaspaceFile("never"));
  ASSERT_THAT(never, IsOk());
  EXPECT_THAT(*never->Encode("Hi t"), ElementsAre(1, 2, 6));
  EXPECT_EQ(never->Decode(std::vector<int32_t>{6}), " t");
}

TEST_F(TokenizerPipelineTest, ByteLevelAddsAPrefixSpaceAndSplitsWithGpt2Regex) {
  // Ġ (the byte-level space) 0, a 1, b 2, Ġa 3, Ġab 4, "'" 5, s 6, 's 7.
  Json j = Json::parse(R"({
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"\u0120": 0, "a": 1, "b": 2, "\u0120a": 3,
                                       "\u0120ab": 4, "'": 5, "s": 6, "'s": 7},
              "merges": [["\u0120", "a"], ["\u0120a", "b"], ["'", "s"]]}})");
  auto tok = Load(j);
  ASSERT_THAT(tok, IsOk());
  // " ab b's" -> " ab" | " b" | "'s": "Ġab"; "Ġ" "b" (no merge Ġ b); "'s".
  EXPECT_THAT(*tok->Encode("ab b's"), ElementsAre(4, 0, 2, 7));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{4, 0, 2, 7}), " ab b's");
}

TEST_F(TokenizerPipelineTest, SplitBehavioursCutAsHuggingFaceSays) {
  // Pieces are single letters or "-" runs, each a vocabulary entry: the ids show the cuts.
  Json j = Json::parse(R"({
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "-+"}, "invert": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "-": 2, "a-": 3, "-b": 4, "--": 5,
                                       "a--": 6, "--b": 7},
              "merges": [["-", "-"], ["a", "-"], ["-", "b"], ["a-", "-"], ["--", "b"],
                         ["a", "--"]]}})");
  const std::vector<std::pair<const char*, std::vector<int32_t>>> cases = {
      {"Isolated", {0, 5, 1}},         // a | -- | b
      {"Removed", {0, 1}},             // a | b
      {"MergedWithPrevious", {6, 1}},  // a-- (-- first, then a + --) | b
      {"MergedWithNext", {0, 7}},      // a | --b (-- first, then -- + b)
      {"Contiguous", {0, 5, 1}},       // one run of delimiters: as Isolated
  };
  for (const auto& [behavior, want] : cases) {
    j["pre_tokenizer"]["behavior"] = behavior;
    auto tok = Load(j);
    ASSERT_THAT(tok, IsOk());
    auto ids = tok->Encode("a--b");
    ASSERT_THAT(ids, IsOk());
    EXPECT_EQ(*ids, want) << behavior;
  }
}

TEST_F(TokenizerPipelineTest, OneTokenizerServesTwoThreadsAlike) {
  auto tok = Load(MetaspaceFile("first"));
  ASSERT_THAT(tok, IsOk());
  const std::vector<std::string> texts = {"Hi t", "t Hi", "Hi<s>t t", "HiHi  t"};
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(*tok->Encode(t));
  std::vector<int> bad(2, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 2; ++th) {
    threads.emplace_back([&, th] {
      const Tokenizer copy = *tok;  // copies share the tables
      for (int rep = 0; rep < 2000; ++rep) {
        const size_t k = static_cast<size_t>(rep + th) % texts.size();
        auto ids = copy.Encode(texts[k]);
        if (!ids.ok() || *ids != want[k]) ++bad[th];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad[0] + bad[1], 0);
}

}  // namespace
}  // namespace strata::tokenizers
