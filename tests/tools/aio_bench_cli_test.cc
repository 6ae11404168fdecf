// aio_bench as a user runs it (issue 9): the program on a scratch directory with small sizes,
// its exit code, stdout (JSON) and stderr lines.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/aio_or_skip.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::ScratchDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

struct Output {
  int rc = -1;
  std::string out, err;
  // stdout as JSON (discarded if it does not parse).
  Json json() const { return Json::parse(out, nullptr, false); }
  // Lines of stderr that contain `s`.
  int ErrLinesWith(const std::string& s) const {
    std::istringstream in(err);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(s) != std::string::npos;
    return n;
  }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs aio_bench with `args`; stdout and stderr go to files in `scratch`.
Output RunAioBench(const ScratchDir& scratch, std::vector<std::string> args) {
  const std::string out_path = scratch.File("stdout.txt"), err_path = scratch.File("stderr.txt");
  args.insert(args.begin(), STRATA_AIO_BENCH_PATH);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Output r;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    r.rc = WEXITSTATUS(status);
  }
  r.out = Slurp(out_path);
  r.err = Slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

// A directory holding nothing but what the test put there.
bool IsEmpty(const std::filesystem::path& dir) {
  return std::filesystem::directory_iterator(dir) == std::filesystem::directory_iterator();
}

// `auto` keeps the suite running where the kernel refuses io_uring (it falls back to libaio).
const std::vector<std::string> kSmall = {"--block-size", "1M", "--queue-depth", "8",
                                         "--file-size",  "8M", "--engine",      "auto"};

std::vector<std::string> With(std::vector<std::string> args) {
  args.insert(args.end(), kSmall.begin(), kSmall.end());
  return args;
}

TEST(AioBenchCliTest, ReadOnAnEmptyDirectoryLaysOutItsFileFirst) {
  ScratchDir logs, dir;
  Output r = RunAioBench(logs, With({"--path", dir.path().string(), "--op", "read", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  Json j = r.json();
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["op"], "read");
  EXPECT_EQ(j["file_size"], 8u << 20);
  EXPECT_EQ(j["verified"], true);
  EXPECT_GT(j["gbps"].get<double>(), 0);
  EXPECT_EQ(r.ErrLinesWith("laying out"), 1) << r.err;
  EXPECT_TRUE(IsEmpty(dir.path())) << "the scratch file is removed";
}

TEST(AioBenchCliTest, WriteAndBothPrintOneResultDocument) {
  ScratchDir logs, dir;
  Output w = RunAioBench(logs, With({"--path", dir.path().string(), "--op", "write", "--json"}));
  ASSERT_EQ(w.rc, 0) << w.err;
  EXPECT_EQ(w.json()["op"], "write");
  Output b = RunAioBench(
      logs, With({"--path", dir.path().string(), "--op", "both", "--json", "--emit-config"}));
  ASSERT_EQ(b.rc, 0) << b.err;
  Json j = b.json();
  ASSERT_FALSE(j.is_discarded()) << "--emit-config with --json stays one document: " << b.out;
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["op"], "write");
  EXPECT_EQ(j["points"][1]["op"], "read");
  EXPECT_EQ(j["points"][1]["verified"], true);
  EXPECT_TRUE(j["config"].contains("aio"));
  EXPECT_EQ(b.ErrLinesWith("laying out"), 0) << "the write of the run lays the file out";
  EXPECT_TRUE(IsEmpty(dir.path()));
}

TEST(AioBenchCliTest, RefusalsHaveOnePrefixAndNoResult) {
  ScratchDir logs, dir;
  const std::string missing = dir.File("missing");
  Output r = RunAioBench(logs, With({"--path", missing, "--op", "read", "--json"}));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.ErrLinesWith("aio_bench:"), 1) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("aio_bench: NotFound: "), HasSubstr(missing),
                           Not(HasSubstr("aio_bench: aio_bench"))));
  Json j = r.json();
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr(missing));
  EXPECT_FALSE(j.contains("gbps"));
  EXPECT_FALSE(j.contains("points"));

  Output u = RunAioBench(logs, {"--path", dir.path().string(), "--queue-dept", "8"});
  EXPECT_EQ(u.rc, 2);
  EXPECT_EQ(u.ErrLinesWith("aio_bench:"), 1) << u.err;
  EXPECT_THAT(u.err, HasSubstr("did you mean --queue-depth"));
  EXPECT_EQ(u.out, "");
}

TEST(AioBenchCliTest, ForeignFileIsReadUnverifiedAndSaidOnce) {
  // --sweep runs every engine, io_uring among them: a kernel that refuses it cannot run this.
  STRATA_AIO_OR_SKIP(IoEngineKind::kIoUring);
  ScratchDir logs, dir;
  const std::string file = dir.File("data.bin");
  {
    std::ofstream out(file, std::ios::binary);
    auto bytes = ::strata::testing::RandomBytes(1 << 20, ::strata::testing::TestSeed());
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  // A sweep of reads: 16 points, one message.
  Output r = RunAioBench(logs, {"--file", file, "--op", "read", "--sweep", "quick", "--file-size",
                                "1M", "--request-size", "1M", "--json", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.ErrLinesWith("does not hold aio_bench's pattern"), 1) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("DataLoss")));
  Json j = r.json();
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["points"].size(), 16u);
  for (const Json& p : j["points"]) EXPECT_EQ(p["verified"], false);
  EXPECT_THAT(j["verify_note"].get<std::string>(), HasSubstr("without verification"));
  EXPECT_TRUE(std::filesystem::exists(file)) << "--file is kept";
}

class AioBenchDamageTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(AioBenchDamageTest, DamageToItsOwnFileIsDataLoss) {
  ScratchDir logs, dir;
  const std::string file = dir.File("own.dat");
  Output w = RunAioBench(logs, With({"--file", file, "--op", "write", "--quiet"}));
  ASSERT_EQ(w.rc, 0) << w.err;
  // A read without damage verifies.
  Output ok = RunAioBench(logs, With({"--file", file, "--op", "read", "--json", "--quiet"}));
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(ok.json()["verified"], true);
  const uint64_t offset = GetParam();
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(std::string(4096, '\xEE').data(), 4096);
  }
  Output r = RunAioBench(logs, With({"--file", file, "--op", "read", "--json", "--quiet"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.ErrLinesWith("aio_bench:"), 1) << r.err;
  const std::string where = "block at offset " + std::to_string(offset) + " holds the wrong data";
  EXPECT_THAT(r.err, AllOf(HasSubstr("DataLoss"), HasSubstr(where)));
  Json j = r.json();
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["code"], "DataLoss");
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr(where));
  EXPECT_FALSE(j.contains("gbps"));
}

// Block 0, a block in the middle that no probe reads, the last block.
INSTANTIATE_TEST_SUITE_P(Offsets, AioBenchDamageTest,
                         ::testing::Values(uint64_t{0}, uint64_t{(3u << 20) + 3 * 4096},
                                           uint64_t{(8u << 20) - 4096}));

TEST(AioBenchCliTest, JsonOutOfAFailedRunIsAnError) {
  ScratchDir logs, dir;
  const std::string doc = dir.File("result.json");
  Output r = RunAioBench(
      logs, With({"--file", dir.File("missing.dat"), "--op", "read", "--json-out", doc}));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "") << "no table, no result";
  Json j = Json::parse(Slurp(doc), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["code"], "NotFound");
  EXPECT_FALSE(j.contains("points"));
}

}  // namespace
}  // namespace strata
