// Accepting what DeepSpeed accepts: pydantic's string coercions, deprecated keys mapped with one
// warning each, "auto" resolved from the run, hjson comments and "_" keys in a whole config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "tests/engine/config/config_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::AllDiagnostics;
using ::strata::testing::Check;
using ::strata::testing::HasDiag;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

Config Valid(const std::string& text, RunContext run = {}) {
  Config c = Check(text, run);
  EXPECT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  return c;
}

TEST(ConfigCoercionTest, StringsAreReadAsPydanticReadsThem) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": "8", "steps_per_print": "100",
      "wall_clock_breakdown": "true", "gradient_clipping": "0.5",
      "optimizer": {"type": "AdamW", "params": {"lr": "1e-5", "weight_decay": " 0.1 "}},
      "fp16": {"enabled": "yes", "hysteresis": "4", "consecutive_hysteresis": 1},
      "zero_optimization": {"stage": "2", "overlap_comm": "off", "reduce_bucket_size": "5e8"},
      "aio": {"queue_depth": "16", "single_submit": "true"}})");
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 8);
  EXPECT_EQ(c.training.steps_per_print, 100);
  EXPECT_TRUE(c.training.wall_clock_breakdown);
  EXPECT_EQ(c.training.gradient_clipping, 0.5);
  EXPECT_EQ(c.optimizer.lr, 1e-5);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.hysteresis, 4);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.aio.queue_depth, 16);
  EXPECT_TRUE(c.aio.single_submit);
  EXPECT_THAT(c.report.DescribeOrigin("optimizer.params.lr"), HasSubstr("read as a number"));
}

TEST(ConfigCoercionTest, WholeFloatsAreIntegersAndFractionsAreNot) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "sub_group_size": 1e9, "stage3_max_live_parameters": 1.000000e+09}})");
  EXPECT_EQ(c.zero.sub_group_size, 1000000000);
  EXPECT_EQ(c.zero.max_live_parameters, 1000000000);
  EXPECT_THAT(
      LoadConfigText(R"({"train_micro_batch_size_per_gpu": 1.5})", "c.json", {}),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("train_micro_batch_size_per_gpu: must be a whole number, got 1.5")));
}

TEST(ConfigCoercionTest, DeprecatedZeroKeysMapWithOneWarningEach) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "cpu_offload": true, "cpu_offload_param": true, "cpu_offload_use_pin_memory": true,
      "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
  EXPECT_TRUE(HasDiag(c, Severity::kWarning, "zero_optimization.cpu_offload",
                      "read as offload_optimizer.device = \"cpu\""));
  EXPECT_TRUE(HasDiag(c, Severity::kWarning, "zero_optimization.cpu_offload_param",
                      "read as offload_param.device = \"cpu\""));
  EXPECT_TRUE(
      HasDiag(c, Severity::kWarning, "zero_optimization.cpu_offload_use_pin_memory", "deprecated"));
  EXPECT_TRUE(HasDiag(c, Severity::kWarning,
                      "zero_optimization.stage3_gather_fp16_weights_on_model_save",
                      "read as stage3_gather_16bit_weights_on_model_save"));
  EXPECT_EQ(c.report.Count(Severity::kWarning), 4u) << AllDiagnostics(c);
  EXPECT_THAT(c.report.DescribeOrigin("zero_optimization.offload_param.device"),
              HasSubstr("cpu_offload_param = true"));
  // Strata also takes the plural spelling shared/CONFIG.md uses.
  Config p = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "cpu_offload_params": true}})");
  EXPECT_EQ(p.zero.offload_param.device, OffloadDevice::kCpu);
}

TEST(ConfigCoercionTest, OldBooleanZeroSectionMeansStageOne) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": true,
      "allgather_size": 2e8})");
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.zero.allgather_bucket_size, 200000000);
  EXPECT_TRUE(HasDiag(c, Severity::kWarning, "zero_optimization", "old form"));
}

TEST(ConfigCoercionTest, OtherOldNames) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": true,
      "check_overflow": true}, "aio": {"thread_count": 4},
      "zero_optimization": {"stage": 3, "prefetch_bucket_size": 123,
      "gather_16bit_weights_on_model_save": true}})");
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_TRUE(c.bf16.check_grad_overflow);
  EXPECT_EQ(c.aio.thread_count, 4);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 123);
  EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
  EXPECT_TRUE(HasDiag(c, Severity::kWarning, "bfloat16", "old name of 'bf16'"));
  EXPECT_TRUE(HasDiag(c, Severity::kWarning, "aio.thread_count", "intra_op_parallelism"));
  EXPECT_THAT(c.report.DescribeOrigin("zero_optimization.stage3_prefetch_bucket_size"),
              HasSubstr("as 'prefetch_bucket_size'"));
}

TEST(ConfigCoercionTest, AutoResolvesFromTheRunAndTheModel) {
  RunContext run;
  run.hidden_size = 1024;
  run.learning_rate = 3e-4;
  run.warmup_num_steps = 50;
  run.total_num_steps = 500;
  run.precision = "bf16";
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_max_lr": "auto",
      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
      "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})",
                   run);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 50);
  EXPECT_EQ(c.scheduler.total_num_steps, 500);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.zero.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(c.zero.prefetch_bucket_size, static_cast<int64_t>(0.9 * 1024 * 1024));
  EXPECT_EQ(c.zero.param_persistence_threshold, 10240);
  EXPECT_THAT(c.report.DescribeOrigin("zero_optimization.reduce_bucket_size"),
              HasSubstr("hidden² = 1048576"));
}

TEST(ConfigCoercionTest, AutoWithoutTheModelTakesDeepSpeedsDefaults) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"}})");
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
  EXPECT_THAT(c.report.DescribeOrigin("zero_optimization.reduce_bucket_size"),
              HasSubstr("no model hidden size"));
}

TEST(ConfigCoercionTest, TotalStepsAutoIsLeftToTheRunOnlyInACheck) {
  const std::string text = R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type":
      "WarmupDecayLR", "params": {"total_num_steps": "auto"}}})";
  RunContext check;
  check.require_run_values = false;
  Config c = Valid(text, check);
  EXPECT_FALSE(c.scheduler.total_num_steps.has_value());
  EXPECT_THAT(c.report.DescribeOrigin("scheduler.params.total_num_steps"),
              HasSubstr("the run's step count"));
  EXPECT_THAT(LoadConfigText(text, "s.json", RunContext{}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("scheduler.params.total_num_steps: is \"auto\" but the run does "
                                 "not say how many steps it has")));
}

TEST(ConfigCoercionTest, CommentsTrailingCommasAndUnderscoreKeysInAConfig) {
  Config c = Valid(R"(// ZeRO-2, written by hand
{
  "_comment": "underscore keys are comments",
  "train_micro_batch_size_per_gpu": 2,  # per GPU
  "zero_optimization": {
    "_why": "fits in 24 GB",
    "stage": 2, /* no offload */
  },
})");
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.report.diagnostics.size(), 0u) << AllDiagnostics(c);
}

}  // namespace
}  // namespace strata
