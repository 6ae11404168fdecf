// `strata report` checked against what the system says through other means (statvfs, getrlimit,
// a raw io_uring_setup), not against the report's own code.
#include <linux/io_uring.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

nlohmann::json ReportJson(const std::string& dir) {
  testing::CommandResult r =
      testing::RunCommand(std::string(STRATA_BIN) + " report --json --path " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

const nlohmann::json* FindCheck(const nlohmann::json& j, const std::string& name) {
  for (const auto& c : j["checks"]) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

TEST(StrataReportTest, ListsEverySectionWithKnownLevelsAndMatchingSummary) {
  testing::ScratchDir dir;
  nlohmann::json j = ReportJson(dir.path().string());
  std::set<std::string> sections;
  int counts[3] = {0, 0, 0};
  for (const auto& c : j["checks"]) {
    sections.insert(c["section"].get<std::string>());
    std::string level = c["level"];
    ASSERT_TRUE(level == "ok" || level == "warning" || level == "missing") << level;
    ++counts[level == "ok" ? 0 : level == "warning" ? 1 : 2];
    if (level != "ok") {
      EXPECT_FALSE(c["advice"].get<std::string>().empty()) << c.dump();
    }
  }
  EXPECT_EQ(sections, (std::set<std::string>{"build", "devices", "io", "cpu", "memory"}));
  EXPECT_EQ(j["summary"]["ok"], counts[0]);
  EXPECT_EQ(j["summary"]["warning"], counts[1]);
  EXPECT_EQ(j["summary"]["missing"], counts[2]);
  for (const char* name : {"io_uring", "libaio", "O_DIRECT", "free space", "cpu_adam SIMD",
                           "topology", "locked memory", "GPU", "MPI", "CUDA"}) {
    EXPECT_NE(FindCheck(j, name), nullptr) << name;
  }
}

TEST(StrataReportTest, FreeSpaceAndLockLimitMatchTheSystem) {
  testing::ScratchDir dir;
  nlohmann::json j = ReportJson(dir.path().string());
  struct statvfs vfs {};
  ASSERT_EQ(statvfs(dir.path().c_str(), &vfs), 0);
  const double free_now = double(vfs.f_bavail) * double(vfs.f_frsize);
  const nlohmann::json* space = FindCheck(j, "free space");
  ASSERT_NE(space, nullptr);
  // Other processes write to this disk meanwhile: within 1 GiB.
  EXPECT_NEAR(space->at("data")["free_bytes"].get<double>(), free_now, double(1 << 30));

  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  const nlohmann::json* lock = FindCheck(j, "locked memory");
  ASSERT_NE(lock, nullptr);
  if (lim.rlim_cur == RLIM_INFINITY) {
    EXPECT_TRUE(lock->at("data")["memlock_limit_bytes"].is_null());
  } else {
    EXPECT_EQ(lock->at("data")["memlock_limit_bytes"].get<uint64_t>(), lim.rlim_cur);
  }
}

TEST(StrataReportTest, IoUringVerdictMatchesARawSetup) {
  io_uring_params params;
  std::memset(&params, 0, sizeof(params));
  int fd = static_cast<int>(syscall(__NR_io_uring_setup, 4, &params));
  const bool kernel_allows = fd >= 0;
  if (fd >= 0) close(fd);
  testing::ScratchDir dir;
  nlohmann::json j = ReportJson(dir.path().string());
  const nlohmann::json* ring = FindCheck(j, "io_uring");
  ASSERT_NE(ring, nullptr);
  EXPECT_EQ(ring->at("data")["available"].get<bool>(), kernel_allows);
  EXPECT_EQ(ring->at("level").get<std::string>(), kernel_allows ? "ok" : "missing");
}

TEST(StrataReportTest, ODirectProbeLeavesNothingBehind) {
  testing::ScratchDir dir;
  nlohmann::json j = ReportJson(dir.path().string());
  const nlohmann::json* dio = FindCheck(j, "O_DIRECT");
  ASSERT_NE(dio, nullptr);
  EXPECT_EQ(dio->at("level"), "ok") << dio->dump();  // the scratch dir is on the ext4 work disk
  EXPECT_GT(dio->at("data")["dio_offset_align"].get<int>(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(StrataReportTest, MissingDirectoryIsReportedNotFatal) {
  testing::ScratchDir dir;
  nlohmann::json j = ReportJson(dir.File("no-such-dir"));
  const nlohmann::json* dio = FindCheck(j, "O_DIRECT");
  ASSERT_NE(dio, nullptr);
  EXPECT_EQ(dio->at("level"), "missing");
  EXPECT_THAT(dio->at("detail").get<std::string>(), HasSubstr("no-such-dir is not a directory"));
}

TEST(StrataReportTest, BadFlagIsAUsageErrorNamingIt) {
  testing::CommandResult r = testing::RunCommand(std::string(STRATA_BIN) + " report --jsn");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("strata report: unknown flag --jsn (did you mean --json?)"));
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
}  // namespace strata
