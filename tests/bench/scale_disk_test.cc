// bench/scale's disk check as a user meets it: an estimate on a disk too small for a size says so
// and exits 0; a run refuses before training anything, and the sizes its advice names then run.
// The free space is set with --disk-free below what a size needs by the estimate's own JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string Scale(const testing::ScratchDir& dir) {
  return std::string(STRATA_SCALE_BIN) + " --quick --steps 2 --seq 8 --dir " + dir.File("swap");
}

// A free size between what 2b and max need: 1b and 2b fit, max does not.
uint64_t FreeForTwoOfThree(const testing::ScratchDir& dir) {
  testing::CommandResult r = testing::RunCommand(Scale(dir) + " --estimate-only --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"].size(), 3u);
  const double mid = j["plan"][1]["disk_needed_bytes"].get<double>();
  const double max = j["plan"][2]["disk_needed_bytes"].get<double>();
  EXPECT_LT(mid, max);
  return static_cast<uint64_t>((mid + max) / 2);
}

TEST(ScaleDiskTest, AnEstimateSaysWhichSizesDoNotFitAndExitsZero) {
  testing::ScratchDir dir;
  const std::string free = std::to_string(FreeForTwoOfThree(dir));
  testing::CommandResult r =
      testing::RunCommand(Scale(dir) + " --estimate-only --json --disk-free " + free);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["disk_free_bytes"].get<double>(), std::stod(free));
  EXPECT_TRUE(j["plan"][0]["fits_on_disk"].get<bool>());
  EXPECT_TRUE(j["plan"][1]["fits_on_disk"].get<bool>());
  EXPECT_FALSE(j["plan"][2]["fits_on_disk"].get<bool>());
  EXPECT_EQ(j["sizes_that_fit"], "1b,2b");
  EXPECT_THAT(j["not_enough_disk"].get<std::string>(), HasSubstr("max needs"));
  // The time of the run the refusal advises: the sizes that fit, not every size.
  const double fit_s = j["plan"][0]["estimated_nvme_s"].get<double>() +
                       j["plan"][1]["estimated_nvme_s"].get<double>();
  const double all_s = fit_s + j["plan"][2]["estimated_nvme_s"].get<double>();
  EXPECT_GT(fit_s, 0);
  EXPECT_NEAR(j["estimated_min_s_sizes_that_fit"].get<double>(), fit_s, 1e-9 * all_s);
  EXPECT_NEAR(j["estimated_min_s"].get<double>(), all_s, 1e-9 * all_s);

  r = testing::RunCommand(Scale(dir) + " --estimate-only --disk-free " + free);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(more than the disk has)"));
  EXPECT_THAT(r.out, HasSubstr("a run would be refused"));
  EXPECT_THAT(r.out, HasSubstr("a run of the sizes that fit (--sizes 1b,2b) should take >= "));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("the whole run should take")));
  // With every size fitting, the whole run's time.
  r = testing::RunCommand(Scale(dir) + " --estimate-only");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the whole run should take >= "));
}

TEST(ScaleDiskTest, ARunRefusesBeforeTrainingAndItsAdviceRuns) {
  testing::ScratchDir dir;
  const std::string cmd =
      Scale(dir) + " --json --disk-free " + std::to_string(FreeForTwoOfThree(dir));
  testing::CommandResult r = testing::RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.out.find("\"sizes\""), std::string::npos) << "no size may train: " << r.out;
  EXPECT_THAT(r.err, HasSubstr("scale: not enough disk in "));
  EXPECT_THAT(r.err, HasSubstr("max needs"));
  const std::string advice = "run the sizes that fit: ";
  const size_t at = r.err.find(advice);
  ASSERT_NE(at, std::string::npos) << r.err;
  std::string flags = r.err.substr(at + advice.size());
  flags = flags.substr(0, flags.find('\n'));
  EXPECT_EQ(flags, "--sizes 1b,2b");

  r = testing::RunCommand(cmd + " " + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["all_sizes_ran"].get<bool>());
  ASSERT_EQ(j["sizes"].size(), 2u);
  EXPECT_EQ(j["sizes"][0]["size"], "1b");
  EXPECT_EQ(j["sizes"][1]["size"], "2b");
}

}  // namespace
}  // namespace strata
