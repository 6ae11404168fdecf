#include "engine/optim/loss_scaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

LossScalerOptions Dynamic(double init, int64_t window, int64_t hysteresis, bool consecutive) {
  LossScalerOptions o;
  o.dynamic = true;
  o.initial_scale = init;
  o.scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_scale = 1;
  return o;
}

// Worked by hand from DeepSpeed's rules (CONFIG.md): scale 2^16, window 3, hysteresis 2.
TEST(LossScalerTest, FollowsDeepSpeedsSkipBackoffGrowSequence) {
  Result<LossScaler> s = LossScaler::Create(Dynamic(65536, 3, 2, false));
  ASSERT_THAT(s.status(), IsOk());
  struct Step {
    bool overflow;
    double scale_after;
  };
  const std::vector<Step> steps = {
      {true, 65536},   // hysteresis 2 -> 1, scale kept
      {true, 32768},   // hysteresis at 1: halve
      {false, 32768},  // 1st clean step after the overflow
      {false, 32768},  // 2nd
      {false, 32768},  // 3rd
      {false, 65536},  // 4th: 3 clean steps *since* the overflow step -> double, hysteresis 2
      {true, 65536},   // hysteresis refilled to 2 -> 1
      {false, 65536}, {true, 32768},  // not consecutive: hysteresis still 1 -> halve
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_THAT(s->Update(steps[i].overflow), IsOk());
    EXPECT_EQ(s->scale(), steps[i].scale_after) << "step " << i;
  }
}

TEST(LossScalerTest, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  Result<LossScaler> s = LossScaler::Create(Dynamic(1024, 100, 2, true));
  ASSERT_THAT(s.status(), IsOk());
  for (int i = 0; i < 5; ++i) {  // overflow, clean, overflow, ... never two overflows in a row
    ASSERT_THAT(s->Update(true), IsOk());
    EXPECT_EQ(s->scale(), 1024);
    ASSERT_THAT(s->Update(false), IsOk());
  }
  ASSERT_THAT(s->Update(true), IsOk());
  ASSERT_THAT(s->Update(true), IsOk());
  EXPECT_EQ(s->scale(), 512);
}

TEST(LossScalerTest, OverflowAtTheMinimumIsAnErrorNamingTheKey) {
  LossScalerOptions o = Dynamic(4, 1000, 1, false);
  o.min_scale = 2;
  Result<LossScaler> s = LossScaler::Create(o);
  ASSERT_THAT(s.status(), IsOk());
  ASSERT_THAT(s->Update(true), IsOk());
  EXPECT_EQ(s->scale(), 2);
  EXPECT_THAT(s->Update(true), StatusIs(StatusCode::kAborted, HasSubstr("fp16.min_loss_scale")));
  o.raise_error_at_min_scale = false;
  Result<LossScaler> quiet = LossScaler::Create(o);
  ASSERT_THAT(quiet->Update(true), IsOk());
  ASSERT_THAT(quiet->Update(true), IsOk());
  EXPECT_EQ(quiet->scale(), 2);
}

// A reference formulated differently: a count of clean steps in a row (DeepSpeed counts
// iterations since the last overflow); the scale doubles when the streak minus one is a positive
// multiple of the window.
TEST(LossScalerTest, MatchesAStreakReferenceOnRandomOverflowPatterns) {
  std::mt19937_64 rng(testing::TestSeed());
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t window = 1 + static_cast<int64_t>(rng() % 6);
    const int64_t hysteresis = 1 + static_cast<int64_t>(rng() % 3);
    const bool consecutive = rng() % 2;
    LossScalerOptions o = Dynamic(1 << 20, window, hysteresis, consecutive);
    o.raise_error_at_min_scale = false;
    Result<LossScaler> s = LossScaler::Create(o);
    ASSERT_THAT(s.status(), IsOk());
    double scale = 1 << 20;
    int64_t streak = 0, left = hysteresis;
    for (int step = 0; step < 200; ++step) {
      const bool overflow = rng() % 4 == 0;
      if (overflow) {
        streak = 0;
        if (left <= 1) {
          scale = std::max(scale / 2, 1.0);
        } else {
          --left;
        }
      } else {
        // Before the first overflow DeepSpeed's count starts one step early (last = -1).
        ++streak;
        if (consecutive) left = hysteresis;
        if (streak - 1 > 0 && (streak - 1) % window == 0) {
          if (!consecutive) left = hysteresis;
          scale *= 2;
        }
      }
      ASSERT_THAT(s->Update(overflow), IsOk());
      ASSERT_EQ(s->scale(), scale) << "trial " << trial << " step " << step;
    }
  }
}

TEST(LossScalerTest, StateRoundTripResumesExactly) {
  Result<LossScaler> a = LossScaler::Create(Dynamic(256, 2, 2, false));
  for (bool o : {true, false, true, true, false}) ASSERT_THAT(a->Update(o), IsOk());
  Result<LossScaler> b = LossScaler::Create(Dynamic(256, 2, 2, false));
  b->set_state(a->state());
  for (bool o : {false, false, true, false, false, false, true, true}) {
    ASSERT_THAT(a->Update(o), IsOk());
    ASSERT_THAT(b->Update(o), IsOk());
    ASSERT_EQ(a->scale(), b->scale());
  }
}

TEST(LossScalerTest, StaticAndDefaultScalersNeverChange) {
  LossScaler none;
  LossScalerOptions o;
  o.initial_scale = 128;
  Result<LossScaler> fixed = LossScaler::Create(o);
  for (int i = 0; i < 5; ++i) {
    ASSERT_THAT(none.Update(i % 2 == 0), IsOk());
    ASSERT_THAT(fixed->Update(true), IsOk());
  }
  EXPECT_EQ(none.scale(), 1);
  EXPECT_EQ(fixed->scale(), 128);
}

TEST(LossScalerTest, RejectsBadOptionsNamingTheKey) {
  EXPECT_THAT(LossScaler::Create(Dynamic(0, 10, 2, false)).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("loss scale must be > 0")));
  EXPECT_THAT(LossScaler::Create(Dynamic(8, 0, 2, false)).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("fp16.loss_scale_window")));
  EXPECT_THAT(LossScaler::Create(Dynamic(8, 10, 0, false)).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("fp16.hysteresis")));
  LossScalerOptions o = Dynamic(8, 10, 2, false);
  o.min_scale = 16;
  EXPECT_THAT(LossScaler::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("fp16.min_loss_scale")));
}

}  // namespace
}  // namespace strata
