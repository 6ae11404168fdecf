// `strata config check` through the built program: exit codes, the resolved view, --json.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/reader/json_document.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

struct CliRun {
  int exit_code;
  std::string out;  // stdout and stderr
};

// `stderr_too`: stdout and stderr together; else stdout only (stderr dropped).
CliRun Strata(const std::string& args, bool stderr_too = true) {
  std::string cmd = std::string(STRATA_BIN) + " " + args + (stderr_too ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kData = std::string(STRATA_SOURCE_DIR) + "/tests/data/dsconfigs/";

TEST(ConfigCliTest, ValidConfigPrintsEveryValueWithItsOrigin) {
  CliRun r =
      Strata("config check " + kData + "llamafactory_ds_z3_offload_config.json --world-size 4");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("resolved config (world size 4)"));
  EXPECT_THAT(r.out, HasSubstr("zero_optimization.stage"));
  EXPECT_THAT(r.out, HasSubstr("auto: Strata's default 1"));
  EXPECT_THAT(r.out, HasSubstr("derived: 1 × world 4"));
  EXPECT_THAT(r.out, HasSubstr("warning: comms_config: not a DeepSpeed key, ignored"));
  EXPECT_THAT(r.out, HasSubstr("valid, 2 warning(s)"));
}

TEST(ConfigCliTest, BrokenConfigExitsTwoNamingTheKey) {
  CliRun r =
      Strata("config check " + kData + "broken/deepspeedexamples_ds_zero-offload_10B_config.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(":8:5: error: zero_optimization.comm_overlap"));
  EXPECT_THAT(r.out, HasSubstr("did you mean 'overlap_comm'?"));
}

TEST(ConfigCliTest, JsonHasNoAutoLeft) {
  CliRun r = Strata("config check " + kData +
                        "transformers_ds_config_zero2.json --json --world-size 2"
                        " --hidden-size 512",
                    /*stderr_too=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Result<JsonDocument> doc = ParseJsonDocument(r.out, "stdout");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString() << "\n" << r.out;
  // Only Strata's own run-time choices (strata.aio_engine, device, comm_backend) may say "auto".
  Json without_strata = doc->root;
  without_strata.erase("strata");
  EXPECT_EQ(without_strata.dump().find("\"auto\""), std::string::npos) << r.out;
  EXPECT_EQ(doc->root["train_batch_size"], 2);
  EXPECT_EQ(doc->root["zero_optimization"]["stage"], 2);
  EXPECT_EQ(doc->root["optimizer"]["type"], "AdamW");
}

TEST(ConfigCliTest, RepositoryExampleConfigPasses) {
  CliRun r =
      Strata("config check " + std::string(STRATA_SOURCE_DIR) + "/configs/zero3_nvme_offload.json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("zero_optimization.offload_optimizer.nvme_path"));
}

TEST(ConfigCliTest, BadUsageExitsTwo) {
  EXPECT_EQ(Strata("config").exit_code, 2);
  EXPECT_EQ(Strata("config chek x.json").exit_code, 2);
  EXPECT_EQ(Strata("config check").exit_code, 2);
  EXPECT_EQ(Strata("config check a.json --world-size 0").exit_code, 2);
  CliRun missing = Strata("config check /nonexistent/ds.json");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("/nonexistent/ds.json"));
}

}  // namespace
}  // namespace strata
