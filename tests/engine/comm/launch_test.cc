// `strata launch` end to end: the real strata binary starts launch_probe ranks through mpirun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct LaunchResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

LaunchResult Launch(const std::string& flags, const std::string& probe_args = "") {
  const std::string cmd = std::string(STRATA_EXE) + " launch " + flags + " -- " + PROBE_EXE + " " +
                          probe_args + " 2>&1";
  LaunchResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StrataLaunchTest, ThreeRanksGetTheirEnvironmentAndOneLogEach) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata_launch_" + std::to_string(getpid()));
  LaunchResult r = Launch("--num_procs 3 --master_port 29600 --log_dir " + dir.string());
  EXPECT_EQ(r.code, 0) << r.output;
  // The terminal: rank 0's output, every rank's stderr (prefixed).
  EXPECT_THAT(r.output, HasSubstr("probe rank=0 world=3 local=0/3 master=127.0.0.1:29600"));
  EXPECT_THAT(r.output, Not(HasSubstr("probe rank=1 world")));
  EXPECT_THAT(r.output, HasSubstr("[rank 2] probe stderr from rank 2"));
  EXPECT_THAT(Slurp(dir / "rank_1.log"), HasSubstr("probe rank=1 world=3 local=1/3"));
  EXPECT_THAT(Slurp(dir / "rank_2.log"), HasSubstr("probe stderr from rank 2"));
  std::filesystem::remove_all(dir);
}

TEST(StrataLaunchTest, AFailingRankEndsTheJobWithItsCodeAndIsNamed) {
  LaunchResult r = Launch("--num_procs 3", "--fail_rank 1 --code 7");
  EXPECT_EQ(r.code, 7) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rank 1 ("));
  EXPECT_THAT(r.output, HasSubstr("failed first: exit code 7"));
}

TEST(StrataLaunchTest, AKilledRankIsNamedWithItsSignal) {
  LaunchResult r = Launch("--num_procs 3", "--kill_rank 2");
  EXPECT_EQ(r.code, 137) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rank 2 ("));
  EXPECT_THAT(r.output, HasSubstr("killed by signal 9"));
}

TEST(StrataLaunchTest, DryRunPrintsTheMpirunCommand) {
  LaunchResult r = Launch("--num_procs 3 --dry-run");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("-np 3 --host localhost:3 --map-by slot --bind-to none"));
  EXPECT_THAT(r.output, HasSubstr("launch --as_rank --node_slots localhost=0,1,2 --"));
  if (geteuid() == 0) {
    EXPECT_THAT(r.output, HasSubstr("added --allow-run-as-root"));
  }
}

TEST(StrataLaunchTest, HostfileAndIncludeSelectSlots) {
  const auto hf = std::filesystem::temp_directory_path() / ("hf_" + std::to_string(getpid()));
  std::ofstream(hf) << "localhost slots=4\n";
  LaunchResult r = Launch("--hostfile " + hf.string() + " --include localhost:1,3 --dry-run");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("-np 2 --host localhost:2"));
  EXPECT_THAT(r.output, HasSubstr("--node_slots localhost=1,3 --set_cuda_visible_devices"));
  LaunchResult bad = Launch("--hostfile " + hf.string() + " --include localhost:7 --dry-run");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.output, HasSubstr("has no slot 7"));
  std::filesystem::remove(hf);
}

}  // namespace
}  // namespace strata
