// LR schedules checked at points where DeepSpeed's formulas give closed-form values.
#include "engine/optim/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

LrSchedule Make(const SchedulerConfig& c, double lr = 0.01, double beta1 = 0.9) {
  Result<LrSchedule> s = LrSchedule::Create(c, lr, beta1);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

TEST(LrScheduleTest, NoSchedulerKeepsTheOptimizerLr) {
  LrSchedule s = Make({});
  for (int k : {0, 1, 1000}) EXPECT_EQ(s.LrForStep(k), 0.01);
}

TEST(LrScheduleTest, WarmupLogStartsAtMinAndReachesMaxAfterWarmup) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupLR;
  c.warmup_min_lr = 1e-5;
  c.warmup_max_lr = 1e-3;
  c.warmup_num_steps = 100;
  LrSchedule s = Make(c);
  EXPECT_EQ(s.LrForStep(0), 1e-5);  // set at construction
  EXPECT_EQ(s.LrForStep(1), 1e-5);  // log(1) = 0
  // Step 10 runs at last_batch_iteration 9: gamma = log(10) / log(100) = 1/2.
  EXPECT_NEAR(s.LrForStep(10), 1e-5 + (1e-3 - 1e-5) * 0.5, 1e-15);
  EXPECT_EQ(s.LrForStep(101), 1e-3);
  EXPECT_EQ(s.LrForStep(5000), 1e-3);
}

TEST(LrScheduleTest, WarmupLinearAndDecayToZeroAtTotal) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupDecayLR;
  c.warmup_type = "linear";
  c.warmup_min_lr = 0;
  c.warmup_max_lr = 0.4;
  c.warmup_num_steps = 4;
  c.total_num_steps = 14;
  LrSchedule s = Make(c);
  EXPECT_NEAR(s.LrAt(2), 0.2, 1e-15);  // 2/4 of the way
  EXPECT_NEAR(s.LrAt(4), 0.4, 1e-15);  // (14-4)/(14-4)
  EXPECT_NEAR(s.LrAt(9), 0.2, 1e-15);  // (14-9)/10
  EXPECT_EQ(s.LrAt(14), 0.0);
  EXPECT_EQ(s.LrAt(20), 0.0);  // clamped at 0
}

TEST(LrScheduleTest, WarmupCosineHalfwayIsTheMeanOfOneAndTheFloor) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupCosineLR;
  c.warmup_type = "linear";
  c.warmup_min_ratio = 0.1;
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  c.cos_min_ratio = 0.2;
  LrSchedule s = Make(c, 2.0);
  EXPECT_EQ(s.LrForStep(0), 0.0);  // DeepSpeed's lr before the first step() is 0
  EXPECT_NEAR(s.LrAt(5), 2.0 * (0.1 + 0.5 * 0.9), 1e-14);
  // it = warmup + 50 - 1: progress 1/2, cos = 0 -> ratio = floor + (1 - floor) / 2.
  EXPECT_NEAR(s.LrAt(59), 2.0 * (0.2 + 0.8 * 0.5), 1e-14);
  EXPECT_NEAR(s.LrAt(109), 2.0 * 0.2, 1e-14);
  EXPECT_NEAR(s.LrAt(500), 2.0 * 0.2, 1e-14);  // stays at the floor
}

TEST(LrScheduleTest, OneCyclePeaksAtTheFirstStepSizeAndCyclesMomentumInversely) {
  SchedulerConfig c;
  c.type = SchedulerType::kOneCycle;
  c.cycle_min_lr = 0.001;
  c.cycle_max_lr = 0.011;
  c.cycle_first_step_size = 10;
  c.cycle_second_step_size = 10;
  c.cycle_min_mom = 0.8;
  c.cycle_max_mom = 0.9;
  c.decay_step_size = 5;
  c.decay_lr_rate = 1.0;
  LrSchedule s = Make(c);
  EXPECT_EQ(s.LrForStep(0), 0.001);
  EXPECT_EQ(s.Beta1ForStep(0), 0.8);
  EXPECT_NEAR(s.LrAt(4), 0.001 + 0.01 * 0.5, 1e-15);   // batch 5 of 10 up
  EXPECT_NEAR(s.LrAt(9), 0.011, 1e-15);                // the peak
  EXPECT_NEAR(s.Beta1ForStep(10), 0.8, 1e-15);         // momentum at its low at the LR peak
  EXPECT_NEAR(s.LrAt(14), 0.001 + 0.01 * 0.5, 1e-15);  // half way down
  // After the cycle (it >= 20): min / (1 + rate * (it - 20 + 1) / decay_step_size).
  EXPECT_NEAR(s.LrAt(24), 0.001 / (1.0 + 1.0 * 5.0 / 5.0), 1e-15);
}

TEST(LrScheduleTest, RangeTestStaircaseHoldsEachStep) {
  SchedulerConfig c;
  c.type = SchedulerType::kLRRangeTest;
  c.lr_range_test_min_lr = 0.1;
  c.lr_range_test_step_size = 4;
  c.lr_range_test_step_rate = 2.0;
  c.lr_range_test_staircase = true;
  LrSchedule s = Make(c);
  EXPECT_EQ(s.LrAt(-1), 0.1);
  EXPECT_NEAR(s.LrAt(2), 0.1, 1e-15);        // floor(3/4) = 0
  EXPECT_NEAR(s.LrAt(3), 0.1 * 3.0, 1e-15);  // floor(4/4) = 1 -> 1 + 2
  c.lr_range_test_staircase = false;
  EXPECT_NEAR(Make(c).LrAt(1), 0.1 * (1.0 + 2.0 * 0.5), 1e-15);
}

TEST(LrScheduleTest, ResumeContinuesFromLastBatchIteration) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupLR;
  c.warmup_type = "linear";
  c.warmup_max_lr = 1.0;
  c.warmup_num_steps = 10;
  LrSchedule fresh = Make(c);
  c.last_batch_iteration = 4;
  LrSchedule resumed = Make(c);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(resumed.LrForStep(k), fresh.LrForStep(k + 5)) << k;
}

TEST(LrScheduleTest, RejectsWhatDeepSpeedRejects) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupDecayLR;
  EXPECT_THAT(
      LrSchedule::Create(c, 1, 0.9).status(),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("scheduler.params.total_num_steps")));
  c.type = SchedulerType::kWarmupLR;
  c.warmup_num_steps = 0;
  EXPECT_THAT(LrSchedule::Create(c, 1, 0.9).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("warmup_num_steps")));
}

}  // namespace
}  // namespace strata
