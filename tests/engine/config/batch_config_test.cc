// Batch arithmetic: train_batch_size = micro × accumulation × world, any two give the third, "auto"
// from the run, and errors that show the arithmetic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "tests/engine/config/config_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::AllDiagnostics;
using ::strata::testing::Check;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct BatchCase {
  const char* name;
  const char* keys;  // the batch keys of the config
  int64_t world;
  int64_t train, micro, accum;  // expected
};

class BatchArithmeticTest : public ::testing::TestWithParam<BatchCase> {};

TEST_P(BatchArithmeticTest, ResolvesTheThirdKey) {
  const BatchCase& c = GetParam();
  RunContext run;
  run.world_size = c.world;
  Config cfg = Check(std::string("{") + c.keys + "}", run);
  ASSERT_EQ(cfg.report.ErrorCount(), 0u) << AllDiagnostics(cfg);
  EXPECT_EQ(cfg.batch.train_batch_size, c.train);
  EXPECT_EQ(cfg.batch.micro_batch_per_gpu, c.micro);
  EXPECT_EQ(cfg.batch.gradient_accumulation_steps, c.accum);
  // The identity DeepSpeed asserts, computed independently.
  EXPECT_EQ(c.train, c.micro * c.accum * c.world);
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizes, BatchArithmeticTest,
    ::testing::Values(
        BatchCase{"all_three_w1", R"("train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                  "gradient_accumulation_steps": 8)",
                  1, 32, 4, 8},
        BatchCase{"all_three_w4", R"("train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                  "gradient_accumulation_steps": 2)",
                  4, 32, 4, 2},
        BatchCase{"train_micro_w1",
                  R"("train_batch_size": 16, "train_micro_batch_size_per_gpu": 1)", 1, 16, 1, 16},
        BatchCase{"train_micro_w2",
                  R"("train_batch_size": 16, "train_micro_batch_size_per_gpu": 1)", 2, 16, 1, 8},
        BatchCase{"train_micro_w8",
                  R"("train_batch_size": 16, "train_micro_batch_size_per_gpu": 1)", 8, 16, 1, 2},
        BatchCase{"train_accum_w2", R"("train_batch_size": 64, "gradient_accumulation_steps": 4)",
                  2, 64, 8, 4},
        BatchCase{"micro_accum_w3", R"("train_micro_batch_size_per_gpu": 2,
                  "gradient_accumulation_steps": 5)",
                  3, 30, 2, 5},
        BatchCase{"train_only_w4", R"("train_batch_size": 32)", 4, 32, 8, 1},
        BatchCase{"micro_only_w8", R"("train_micro_batch_size_per_gpu": 3)", 8, 24, 3, 1},
        BatchCase{"float_written", R"("train_batch_size": 3.2e1, "train_micro_batch_size_per_gpu":
                  "4")",
                  2, 32, 4, 4},
        BatchCase{"auto_all_w4", R"("train_batch_size": "auto", "train_micro_batch_size_per_gpu":
                  "auto", "gradient_accumulation_steps": "auto")",
                  4, 4, 1, 1},
        BatchCase{"auto_with_accum", R"("train_batch_size": "auto",
                  "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4)",
                  2, 8, 1, 4},
        BatchCase{"train_with_auto", R"("train_batch_size": 48,
                  "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto")",
                  3, 48, 16, 1}),
    [](const ::testing::TestParamInfo<BatchCase>& info) { return info.param.name; });

TEST(BatchConfigTest, AutoTakesTheRunsValues) {
  RunContext run;
  run.world_size = 4;
  run.micro_batch_per_gpu = 2;
  run.gradient_accumulation_steps = 8;
  Config c = Check(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                       "gradient_accumulation_steps": "auto"})",
                   run);
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 2);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 8);
  EXPECT_EQ(c.batch.train_batch_size, 64);
  EXPECT_THAT(c.report.DescribeOrigin("train_micro_batch_size_per_gpu"),
              HasSubstr("--micro-batch 2"));
  EXPECT_THAT(c.report.DescribeOrigin("train_batch_size"), HasSubstr("derived"));
}

TEST(BatchConfigTest, AbsentKeysTakeTheRunsValues) {
  RunContext run;
  run.micro_batch_per_gpu = 4;
  Config c = Check(R"({"fp16": {"enabled": true}})", run);
  ASSERT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_EQ(c.batch.train_batch_size, 4);
}

TEST(BatchConfigTest, InconsistentValuesShowTheArithmetic) {
  RunContext run;
  run.world_size = 2;
  EXPECT_THAT(LoadConfigText(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                 "gradient_accumulation_steps": 4})",
                             "b.json", run),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("b.json:1:2: error: train_batch_size"),
                             HasSubstr("16 != train_micro_batch_size_per_gpu 1 × "
                                       "gradient_accumulation_steps 4 × world size 2 (= 8)"))));
  run.world_size = 3;
  EXPECT_THAT(LoadConfigText(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1})",
                             "b.json", run),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("train_batch_size 16 is not a multiple of "
                                 "train_micro_batch_size_per_gpu 1 × world size 3 (= 3)")));
}

TEST(BatchConfigTest, NoBatchSizeIsAnError) {
  EXPECT_THAT(LoadConfigText(R"({"gradient_accumulation_steps": 4})", "b.json", {}),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("train_batch_size"), HasSubstr("no batch size"))));
  EXPECT_THAT(LoadConfigText(R"({})", "b.json", {}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no batch size")));
}

TEST(BatchConfigTest, RejectsZeroAndNegativeSizes) {
  EXPECT_THAT(
      LoadConfigText(R"({"train_micro_batch_size_per_gpu": 0})", "b.json", {}),
      StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("train_micro_batch_size_per_gpu"),
                                                   HasSubstr("out of range: must be >= 1"))));
}

}  // namespace
}  // namespace strata
