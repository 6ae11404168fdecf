// The `scheduler` section: DeepSpeed's LR schedules (deepspeed/runtime/lr_schedules.py) with
// their parameter names and defaults. Absent: a constant learning rate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/config/reader/section_reader.h"

namespace strata {

enum class SchedulerType {
  kNone,
  kWarmupLR,
  kWarmupDecayLR,
  kWarmupCosineLR,
  kOneCycle,
  kLRRangeTest
};

// "WarmupLR", ... ("none" for kNone).
std::string_view SchedulerTypeName(SchedulerType t);

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;

  // WarmupLR, WarmupDecayLR (warmup_* also WarmupCosineLR's warmup_num_steps / warmup_type).
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;  // default: the optimizer's lr
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" | "linear"
  // WarmupDecayLR, WarmupCosineLR: required. Unset only when "auto" and the run did not say
  // (strata config check without --total-steps).
  std::optional<int64_t> total_num_steps;

  // WarmupCosineLR: ratios of the optimizer's lr.
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;

  // OneCycle.
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = 2000;  // default: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = 0;  // default: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;

  // LRRangeTest.
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;

  // Resume point (-1 = start).
  int64_t last_batch_iteration = -1;
};

namespace internal {
// `optimizer_lr` is the resolved optimizer lr (WarmupLR's warmup_max_lr default).
void ReadScheduler(const Section& top, double optimizer_lr, SchedulerConfig* out);
}  // namespace internal
}  // namespace strata
