// LrSchedule: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR,
// OneCycle, LRRangeTest; deepspeed/runtime/lr_schedules.py) evaluated exactly as DeepSpeed's
// engine applies them, so a run moved from DeepSpeed sees the same learning rate at every step.
//
// DeepSpeed sets the LR once when the scheduler is made (its value at last_batch_iteration =
// -1) and steps the scheduler after every *applied* optimizer step (a step skipped on fp16
// overflow does not advance it). So the LR of the k-th applied step (k = 0, 1, ...) is the
// schedule at last_batch_iteration = start + k - 1, where start is the config's
// last_batch_iteration (-1 for a fresh run). OneCycle with cycle_momentum also cycles beta1.
#pragma once

#include <cstdint>
#include <optional>

#include "core/status.h"
#include "engine/config/deepspeed/scheduler_config.h"

namespace strata {

class LrSchedule {
 public:
  // `optimizer_lr` is the optimizer's lr (the constant LR without a scheduler, WarmupCosineLR's
  // base); `optimizer_beta1` is kept when no schedule cycles momentum. InvalidArgument naming
  // the scheduler key for values DeepSpeed would reject (warmup_num_steps <= 0, a missing
  // total_num_steps, cycle step sizes <= 0, lr_range_test_step_size <= 0).
  static Result<LrSchedule> Create(const SchedulerConfig& config, double optimizer_lr,
                                   double optimizer_beta1);

  // The LR for the applied optimizer step number `applied_steps` (0-based).
  double LrForStep(int64_t applied_steps) const;
  // beta1 for that step (OneCycle with cycle_momentum; else the optimizer's).
  double Beta1ForStep(int64_t applied_steps) const;

  // The schedule at DeepSpeed's last_batch_iteration (-1 = as set at construction).
  double LrAt(int64_t last_batch_iteration) const;

 private:
  LrSchedule(const SchedulerConfig& c, double lr, double beta1)
      : c_(c), optimizer_lr_(lr), optimizer_beta1_(beta1) {}
  double WarmupGamma(int64_t it) const;  // WarmupLR's ramp in [0, 1]
  double OneCycleScale(int64_t it) const;
  std::optional<double> OneCycleBeta1(int64_t it) const;

  SchedulerConfig c_;
  double optimizer_lr_;
  double optimizer_beta1_;
};

}  // namespace strata
