// Sizing keys as DeepSpeed allows them (issue 36, "Sizes as DeepSpeed allows them"):
// sub_group_size 0, "auto" in every sizing key (the planner's choice, said with its reason),
// offload_param below stage 3 (a warning, no effect). The expected values are DeepSpeed's own
// defaults (deepspeed/runtime/zero/config.py, offload_config.py) and Hugging Face's hidden-size
// rule (transformers/integrations/deepspeed.py), written out here.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/auto_sizes.h"
#include "engine/config/config.h"
#include "tests/engine/config/config_test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::strata::testing::AllDiagnostics;
using ::strata::testing::Check;
using ::strata::testing::HasDiag;
using ::testing::HasSubstr;

const fs::path kSizes = fs::path(STRATA_SOURCE_DIR) / "tests/data/dsconfigs/sizes";

RunContext CheckRun() {
  RunContext run;
  run.require_run_values = false;
  return run;
}

TEST(AutoSizesTest, SubGroupSizeZeroIsAccepted) {
  Config c = Check(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
                       "sub_group_size": 0}})");
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_EQ(c.zero.sub_group_size, 0);
  EXPECT_THAT(c.report.DescribeOrigin("zero_optimization.sub_group_size"),
              HasSubstr("one parameter per sub-group"));
  Config neg = Check(R"({"train_batch_size": 1, "zero_optimization": {"sub_group_size": -1}})");
  EXPECT_TRUE(HasDiag(neg, Severity::kError, "zero_optimization.sub_group_size", ">= 0"))
      << AllDiagnostics(neg);
}

// DeepSpeed's schema takes 0 buffers (ge=0): no effect without NVMe, an error with it.
TEST(AutoSizesTest, ZeroBuffersAreAcceptedUnlessTheyAreSwappedThrough) {
  Config cpu = Check(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "cpu", "buffer_count": 0, "buffer_size": 0},
      "offload_optimizer": {"device": "cpu", "buffer_count": 0}}})");
  EXPECT_EQ(cpu.report.ErrorCount(), 0u) << AllDiagnostics(cpu);
  Config nvme = Check(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/n", "buffer_count": 0},
      "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "buffer_count": 0}}})");
  EXPECT_EQ(nvme.report.ErrorCount(), 2u) << AllDiagnostics(nvme);
  EXPECT_TRUE(HasDiag(nvme, Severity::kError, "zero_optimization.offload_param.buffer_count",
                      "must be >= 1"));
  EXPECT_TRUE(HasDiag(nvme, Severity::kError, "zero_optimization.offload_optimizer.buffer_count",
                      "at least one buffer"));
}

TEST(AutoSizesTest, EverySizingKeyTakesAutoAndSaysWhatItChose) {
  Config c = CheckConfigFile((kSizes / "zero3_every_size_auto.json").string(), CheckRun());
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  const ZeroConfig& z = c.zero;
  // DeepSpeed's defaults (no model hidden size given to the check).
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.param_persistence_threshold, 100000);
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  const char* keys[] = {"zero_optimization.reduce_bucket_size",
                        "zero_optimization.allgather_bucket_size",
                        "zero_optimization.sub_group_size",
                        "zero_optimization.stage3_prefetch_bucket_size",
                        "zero_optimization.stage3_param_persistence_threshold",
                        "zero_optimization.stage3_model_persistence_threshold",
                        "zero_optimization.stage3_max_live_parameters",
                        "zero_optimization.stage3_max_reuse_distance",
                        "zero_optimization.offload_param.buffer_count",
                        "zero_optimization.offload_param.buffer_size",
                        "zero_optimization.offload_param.max_in_cpu",
                        "zero_optimization.offload_optimizer.buffer_count"};
  EXPECT_EQ(z.auto_sizes.size(), std::size(keys));
  const std::string text = AutoSizesText(c);
  for (const char* k : keys) {
    EXPECT_TRUE(z.IsAuto(k)) << k;
    EXPECT_THAT(c.report.DescribeOrigin(k), HasSubstr("DeepSpeed's default")) << k;
    EXPECT_THAT(text, HasSubstr(std::string(k) + " = ")) << text;
  }
  EXPECT_THAT(text, HasSubstr("zero_optimization.offload_param.buffer_count = 5  (\"auto\": "
                              "DeepSpeed's default 5)"));
}

TEST(AutoSizesTest, HiddenSizeKeysFollowHuggingFaceWhenTheModelIsKnown) {
  RunContext run = CheckRun();
  run.hidden_size = 2048;
  Config c = CheckConfigFile((kSizes / "zero3_every_size_auto.json").string(), run);
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_EQ(c.zero.reduce_bucket_size, 2048 * 2048);
  EXPECT_EQ(c.zero.prefetch_bucket_size, static_cast<int64_t>(0.9 * 2048 * 2048));
  EXPECT_EQ(c.zero.param_persistence_threshold, 10 * 2048);
  EXPECT_THAT(AutoSizesText(c), HasSubstr("Hugging Face's rule"));
}

TEST(AutoSizesTest, BufferSizeAutoHoldsTheLargestShard) {
  Config c = CheckConfigFile((kSizes / "zero3_every_size_auto.json").string(), CheckRun());
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  // A 70B Llama's embedding (128256 x 8192 = 1,050,673,152 elements) over 2 ranks: 525,336,576.
  const size_t numels[] = {128256u * 8192u, 8192u, 8192u * 28672u};
  ResolveModelAutoSizes(&c, numels, 2);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 525336576);
  EXPECT_THAT(AutoSizesText(c), HasSubstr("buffer_size = 525336576  (\"auto\": the largest "
                                          "parameter shard"));
  // A small model keeps DeepSpeed's default.
  Config small = CheckConfigFile((kSizes / "zero3_every_size_auto.json").string(), CheckRun());
  const size_t tiny[] = {1000, 10};
  ResolveModelAutoSizes(&small, tiny, 1);
  EXPECT_EQ(small.zero.offload_param.buffer_size, 100000000);
  // A value written in the file is never changed.
  Config fixed = Check(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "cpu", "buffer_size": 1000}}})");
  ResolveModelAutoSizes(&fixed, numels, 1);
  EXPECT_EQ(fixed.zero.offload_param.buffer_size, 1000);
  EXPECT_EQ(AutoSizesText(fixed), "");
}

TEST(AutoSizesTest, OffloadParamBelowStageThreeIsAWarningAndHasNoEffect) {
  for (int stage : {0, 1, 2}) {
    Config c = Check(R"({"train_batch_size": 1, "zero_optimization": {"stage": )" +
                     std::to_string(stage) + R"(, "offload_param": {"device": "cpu"}}})");
    EXPECT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
    EXPECT_TRUE(HasDiag(c, Severity::kWarning, "zero_optimization.offload_param.device",
                        "has no effect at stage " + std::to_string(stage)))
        << AllDiagnostics(c);
    EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);
  }
}

// The configs of tests/data/dsconfigs/sizes (SOURCES.md says where each comes from).
TEST(AutoSizesTest, SizesCorpusPasses) {
  struct Case {
    const char* file;
    const char* warning_path;  // "" for none
  };
  const Case cases[] = {
      {"llamafactory_issue_ds3_sub_group_0.json", ""},
      {"zero3_infinity_sub_group_0_auto_buffers.json", ""},
      {"zero3_every_size_auto.json", ""},
      {"dschat_style_zero2_offload_param_cpu.json", "zero_optimization.offload_param.device"},
  };
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(kSizes)) files += e.path().extension() == ".json";
  EXPECT_EQ(files, std::size(cases));
  for (const Case& k : cases) {
    RunContext run = CheckRun();
    run.micro_batch_per_gpu = 1;  // the Hugging Face config leaves the batch to the run
    Config c = CheckConfigFile((kSizes / k.file).string(), run);
    EXPECT_EQ(c.report.ErrorCount(), 0u) << k.file << "\n" << AllDiagnostics(c);
    EXPECT_EQ(c.report.Count(Severity::kWarning), std::string(k.warning_path).empty() ? 0u : 1u)
        << k.file << "\n"
        << AllDiagnostics(c);
    if (*k.warning_path) {
      EXPECT_TRUE(HasDiag(c, Severity::kWarning, k.warning_path)) << AllDiagnostics(c);
    }
  }
  Config inf = CheckConfigFile((kSizes / "zero3_infinity_sub_group_0_auto_buffers.json").string(),
                               CheckRun());
  EXPECT_EQ(inf.zero.sub_group_size, 0);
  EXPECT_TRUE(inf.zero.IsAuto("zero_optimization.stage3_max_live_parameters"));
  EXPECT_TRUE(inf.zero.IsAuto("zero_optimization.offload_param.buffer_size"));
  EXPECT_EQ(inf.zero.max_live_parameters, 1000000000);
}

}  // namespace
}  // namespace strata
