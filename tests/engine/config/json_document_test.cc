// The hjson-style reader: comments, trailing commas, "_" comment keys, duplicate keys, positions
// and syntax errors with line, column and the text around them.
#include "engine/config/reader/json_document.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(JsonDocumentTest, AcceptsCommentsAndTrailingCommas) {
  Result<JsonDocument> d = ParseJsonDocument(R"(// a DeepSpeed config
{
  # hjson comment
  "a": 1, /* block
  comment */ "b": [1, 2,],
  "c": {"d": true,},
})",
                                             "x.json");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->root["a"], 1);
  EXPECT_EQ(d->root["b"].size(), 2u);
  EXPECT_EQ(d->root["c"]["d"], true);
}

TEST(JsonDocumentTest, DropsUnderscoreKeysAtAnyDepth) {
  Result<JsonDocument> d =
      ParseJsonDocument(R"({"_comment": "x", "a": {"_note": 1, "b": 2}})", "x.json");
  ASSERT_THAT(d, IsOk());
  EXPECT_FALSE(d->root.contains("_comment"));
  EXPECT_FALSE(d->root["a"].contains("_note"));
  EXPECT_EQ(d->root["a"]["b"], 2);
}

TEST(JsonDocumentTest, RecordsLineAndColumnOfEveryKey) {
  Result<JsonDocument> d = ParseJsonDocument(
      "{\n  \"zero\": {\n    \"stage\": 3\n  },\n"
      "  \"betas\": [0.9,\n 0.95]\n}",
      "x.json");
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->Find("zero").line, 2);
  EXPECT_EQ(d->Find("zero").column, 3);
  EXPECT_EQ(d->Find("zero.stage").line, 3);
  EXPECT_EQ(d->Find("zero.stage").column, 5);
  EXPECT_EQ(d->Find("betas[1]").line, 6);
  // A missing key falls back to its nearest ancestor.
  EXPECT_EQ(d->Find("zero.offload_param.device").line, 2);
}

TEST(JsonDocumentTest, ReadsIntegersAsIntegersAndExponentsAsFloats) {
  Result<JsonDocument> d = ParseJsonDocument(R"({"i": 500000000, "f": 5e8, "n": -1.5})", "x");
  ASSERT_THAT(d, IsOk());
  EXPECT_TRUE(d->root["i"].is_number_integer());
  EXPECT_TRUE(d->root["f"].is_number_float());
  EXPECT_EQ(d->root["f"].get<double>(), 5e8);
  EXPECT_EQ(d->root["n"].get<double>(), -1.5);
}

TEST(JsonDocumentTest, SyntaxErrorShowsLineColumnAndText) {
  EXPECT_THAT(ParseJsonDocument("{\n  \"a\": 1\n  \"b\": 2\n}", "cfg.json"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cfg.json:3:3"), HasSubstr("expected ',' or '}'"),
                             HasSubstr("\"b\": 2"), HasSubstr("^"))));
  EXPECT_THAT(
      ParseJsonDocument("{\"a\": tru}", "cfg.json"),
      StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("cfg.json:1:7"), HasSubstr("'tru'"))));
  EXPECT_THAT(ParseJsonDocument("{\"a\": 1", "cfg.json"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("'}' is missing")));
  EXPECT_THAT(ParseJsonDocument("{\"a\": 1 /* open", "cfg.json"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("never closed")));
  EXPECT_THAT(ParseJsonDocument("", "cfg.json"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
}

TEST(JsonDocumentTest, DuplicateKeyIsAnError) {
  EXPECT_THAT(ParseJsonDocument("{\"zero_optimization\": {\"stage\": 1,\n \"stage\": 2}}", "c"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("c:2:2"), HasSubstr("zero_optimization.stage"),
                             HasSubstr("given twice (first at line 1)"))));
}

}  // namespace
}  // namespace strata
