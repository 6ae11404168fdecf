#include "tools/aio_bench/args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata::aio_bench {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

TEST(AioBenchArgsTest, KeepsTheFlagNamesOfTheHandRolledParser) {
  Args a;
  ASSERT_THAT(ParseArgs({"--path",         "/d",
                         "--op",           "read",
                         "--block-size",   "4M",
                         "--queue-depth",  "32",
                         "--threads",      "2",
                         "--engine",       "libaio",
                         "--file-size",    "2G",
                         "--request-size", "16M",
                         "--json",         "--json-out",
                         "o.json",         "--emit-config",
                         "--buffers",      "small",
                         "--no-register",  "--no-fixed-files",
                         "--sqpoll",       "--single-submit",
                         "--no-overlap",   "--allow-buffered",
                         "--no-verify",    "--quiet"},
                        &a),
              IsOk());
  EXPECT_EQ(a.path, "/d");
  EXPECT_EQ(a.op, "read");
  EXPECT_EQ(a.base.aio.block_size, 4u << 20);
  EXPECT_EQ(a.base.aio.queue_depth, 32);
  EXPECT_EQ(a.base.aio.thread_count, 2);
  EXPECT_EQ(a.base.aio.engine, IoEngineKind::kLibaio);
  EXPECT_EQ(a.base.file_size, 2ull << 30);
  EXPECT_EQ(a.base.request_size, 16u << 20);
  EXPECT_TRUE(a.json);
  EXPECT_EQ(a.json_out, "o.json");
  EXPECT_TRUE(a.emit_config);
  EXPECT_FALSE(a.base.huge_pages);
  EXPECT_FALSE(a.base.register_buffers);
  EXPECT_FALSE(a.base.aio.fixed_files);
  EXPECT_TRUE(a.base.aio.sqpoll);
  EXPECT_TRUE(a.base.aio.single_submit);
  EXPECT_FALSE(a.base.aio.overlap_events);
  EXPECT_TRUE(a.base.aio.allow_buffered);
  EXPECT_FALSE(a.base.verify);
  EXPECT_TRUE(a.quiet);
}

TEST(AioBenchArgsTest, DefaultsAreIoUringOneGibibyteAndVerify) {
  Args a;
  ASSERT_THAT(ParseArgs({"--file", "f.dat"}, &a), IsOk());
  EXPECT_EQ(a.base.aio.engine, IoEngineKind::kIoUring);
  EXPECT_EQ(a.base.file_size, 1ull << 30);
  EXPECT_EQ(a.op, "both");
  EXPECT_TRUE(a.base.verify);
  EXPECT_TRUE(a.base.register_buffers);
  EXPECT_TRUE(a.sweep.empty());
}

TEST(AioBenchArgsTest, SweepAloneMeansFullAndSweepsDefaultTo512M) {
  Args a;
  ASSERT_THAT(ParseArgs({"--path", "/d", "--sweep", "--json"}, &a), IsOk());
  EXPECT_EQ(a.sweep, "full");
  EXPECT_TRUE(a.json);
  EXPECT_EQ(a.base.file_size, 512ull << 20);
  Args b;
  ASSERT_THAT(ParseArgs({"--path", "/d", "--sweep"}, &b), IsOk());
  EXPECT_EQ(b.sweep, "full");
  Args c;
  ASSERT_THAT(ParseArgs({"--path", "/d", "--sweep", "quick", "--file-size", "32M"}, &c), IsOk());
  EXPECT_EQ(c.sweep, "quick");
  EXPECT_EQ(c.base.file_size, 32u << 20);
}

TEST(AioBenchArgsTest, RefusesWhatItCannotRun) {
  Args a;
  EXPECT_THAT(ParseArgs({"--path", "/d", "--op", "copy"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("read|write|both")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "--queue-depth", "0"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--queue-depth 0")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "--sweep", "medium"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("quick|full")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "--blok-size", "1M"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("did you mean --block-size")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "--block-size", "1000"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("multiple of 4096")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "extra"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("unexpected argument 'extra'")));
  EXPECT_THAT(ParseArgs({"--path", "/d", "--file", "f"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("exactly one of --path")));
  EXPECT_THAT(ParseArgs({"--json"}, &a),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("exactly one of --path")));
}

TEST(AioBenchArgsTest, HelpListsEveryFlag) {
  Args a;
  ASSERT_THAT(ParseArgs({"--help"}, &a), IsOk());
  ASSERT_TRUE(a.help);
  for (const char* flag : {"--path",         "--file",          "--op",       "--block-size",
                           "--queue-depth",  "--threads",       "--engine",   "--file-size",
                           "--request-size", "--sweep",         "--json",     "--json-out",
                           "--emit-config",  "--buffers",       "--register", "--fixed-files",
                           "--sqpoll",       "--single-submit", "--overlap",  "--allow-buffered",
                           "--verify",       "--quiet"}) {
    EXPECT_THAT(a.help_text, HasSubstr(std::string(flag) + " ")) << flag;
  }
}

}  // namespace
}  // namespace strata::aio_bench
