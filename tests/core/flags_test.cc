#include "core/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::string path = "default";
  std::string op = "read";
  int64_t depth = 8;
  double lr = 0.5;
  uint64_t size = 1024;
  bool json = false;
  bool verify = true;
  std::vector<std::string> includes;
};

FlagParser MakeParser(Parsed* p) {
  FlagParser f("tool [options] FILE");
  f.String("path", &p->path, "where");
  f.Choice("op", &p->op, {"read", "write", "both"}, "operation");
  f.Int("queue-depth", &p->depth, "depth", 1, 1024);
  f.Double("lr", &p->lr, "learning rate");
  f.Bytes("file-size", &p->size, "size");
  f.Bool("json", &p->json, "json output");
  f.Bool("verify", &p->verify, "verify reads");
  f.Custom(
      "include", "HOSTS",
      [p](std::string_view v) {
        p->includes.emplace_back(v);
        return Status::Ok();
      },
      "repeatable");
  return f;
}

TEST(FlagParserTest, ParsesBothFormsAndKeepsDefaults) {
  Parsed p;
  FlagParser f = MakeParser(&p);
  std::vector<std::string> pos;
  ASSERT_THAT(f.Parse({"a.json", "--path", "/x", "--op=write", "--file-size", "2M", "--json",
                       "--no-verify", "--include", "h1", "--include=h2", "b"},
                      &pos),
              IsOk());
  EXPECT_EQ(p.path, "/x");
  EXPECT_EQ(p.op, "write");
  EXPECT_EQ(p.depth, 8);
  EXPECT_EQ(p.size, 2u << 20);
  EXPECT_TRUE(p.json);
  EXPECT_FALSE(p.verify);
  EXPECT_THAT(p.includes, ElementsAre("h1", "h2"));
  EXPECT_THAT(pos, ElementsAre("a.json", "b"));
  EXPECT_TRUE(f.WasSet("path"));
  EXPECT_FALSE(f.WasSet("queue-depth"));
}

TEST(FlagParserTest, EverythingAfterDashDashIsPositional) {
  Parsed p;
  FlagParser f = MakeParser(&p);
  std::vector<std::string> pos;
  size_t split = 0;
  ASSERT_THAT(f.Parse({"--json", "--", "prog", "--json", "-x"}, &pos, &split), IsOk());
  EXPECT_THAT(pos, ElementsAre("prog", "--json", "-x"));
  EXPECT_EQ(split, 0u);
}

TEST(FlagParserTest, RejectsBadValuesNamingTheFlag) {
  Parsed p;
  std::vector<std::string> pos;
  EXPECT_THAT(
      MakeParser(&p).Parse({"--op", "rw"}, &pos),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("allowed values are read|write|both")));
  EXPECT_THAT(
      MakeParser(&p).Parse({"--queue-depth", "0"}, &pos),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("--queue-depth 0: must be in [1, 1024]")));
  EXPECT_THAT(MakeParser(&p).Parse({"--queue-depth", "8x"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not an integer")));
  EXPECT_THAT(MakeParser(&p).Parse({"--file-size", "lots"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--file-size")));
  EXPECT_THAT(MakeParser(&p).Parse({"--path"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--path needs a value")));
  EXPECT_THAT(MakeParser(&p).Parse({"--pth", "x"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("did you mean --path?")));
  EXPECT_THAT(MakeParser(&p).Parse({"-v"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("unknown flag -v")));
  EXPECT_THAT(MakeParser(&p).Parse({"--json=maybe"}, &pos),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("allowed values are true, false")));
}

TEST(FlagParserTest, HelpListsFlagsWithDefaults) {
  Parsed p;
  FlagParser f = MakeParser(&p);
  std::vector<std::string> pos;
  ASSERT_THAT(f.Parse({"--help"}, &pos), IsOk());
  EXPECT_TRUE(f.help_requested());
  std::string h = f.Help();
  EXPECT_THAT(h, HasSubstr("usage: tool [options] FILE"));
  EXPECT_THAT(h, HasSubstr("--queue-depth N"));
  EXPECT_THAT(h, HasSubstr("(default 8)"));
  EXPECT_THAT(h, HasSubstr("--op read|write|both"));
}

}  // namespace
}  // namespace strata
