#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace strata {

Result<LrSchedule> LrSchedule::Create(const SchedulerConfig& c, double optimizer_lr,
                                      double optimizer_beta1) {
  auto bad = [](const std::string& key, const std::string& why) {
    return InvalidArgumentError("scheduler.params." + key + ": " + why);
  };
  switch (c.type) {
    case SchedulerType::kNone:
      break;
    case SchedulerType::kWarmupDecayLR:
    case SchedulerType::kWarmupCosineLR:
      if (!c.total_num_steps) {
        return bad("total_num_steps",
                   "required by " + std::string(SchedulerTypeName(c.type)) +
                       " (give it, or run with --steps so \"auto\" can resolve it)");
      }
      [[fallthrough]];
    case SchedulerType::kWarmupLR:
      if (c.warmup_num_steps <= 0) {
        return bad("warmup_num_steps",
                   "must be a positive integer, got " + std::to_string(c.warmup_num_steps));
      }
      break;
    case SchedulerType::kOneCycle:
      if (c.cycle_first_step_size <= 0 || c.cycle_second_step_size <= 0) {
        return bad("cycle_first_step_size", "cycle step sizes must be > 0");
      }
      break;
    case SchedulerType::kLRRangeTest:
      if (c.lr_range_test_step_size <= 0) {
        return bad("lr_range_test_step_size",
                   "must be > 0, got " + std::to_string(c.lr_range_test_step_size));
      }
      break;
  }
  return LrSchedule(c, optimizer_lr, optimizer_beta1);
}

double LrSchedule::WarmupGamma(int64_t it) const {
  // DeepSpeed clamps the warmup length to at least 2 (log(1) would divide by zero).
  const double steps = static_cast<double>(std::max<int64_t>(2, c_.warmup_num_steps));
  if (static_cast<double>(it) < steps) {
    if (c_.warmup_type == "linear") return static_cast<double>(it) / steps;
    return std::log(static_cast<double>(it) + 1.0) / std::log(steps);
  }
  return 1.0;
}

double LrSchedule::OneCycleScale(int64_t it) const {
  const double first = static_cast<double>(c_.cycle_first_step_size);
  const double second = static_cast<double>(c_.cycle_second_step_size);
  const double total = first + second;
  const double ratio = first / total;
  const double batch = static_cast<double>(it + 1);
  const double cycle = std::floor(1.0 + batch / total);
  const double x = 1.0 + batch / total - cycle;
  double scale;
  int64_t stairs;
  if (x <= ratio) {
    scale = x / ratio;
    stairs = c_.cycle_first_stair_count;
  } else {
    scale = (x - 1.0) / (ratio - 1.0);
    stairs = c_.cycle_second_stair_count;
  }
  if (stairs > 0) {
    const double in_cycle = std::fmod(batch, total);
    const double position = in_cycle <= first
                                ? in_cycle * static_cast<double>(stairs) / first
                                : (total - in_cycle) * static_cast<double>(stairs) / second;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

std::optional<double> LrSchedule::OneCycleBeta1(int64_t it) const {
  if (c_.type != SchedulerType::kOneCycle || !c_.cycle_momentum) return std::nullopt;
  if (it == -1) return c_.cycle_min_mom;  // set at construction
  const double total = static_cast<double>(c_.cycle_first_step_size + c_.cycle_second_step_size);
  if (static_cast<double>(it) < total) {
    return c_.cycle_max_mom - (c_.cycle_max_mom - c_.cycle_min_mom) * OneCycleScale(it);
  }
  if (c_.decay_step_size == 0 || c_.decay_mom_rate == 0) return c_.cycle_max_mom;
  const double interval =
      (static_cast<double>(it) - total + 1.0) / static_cast<double>(c_.decay_step_size);
  return c_.cycle_max_mom * (1.0 + c_.decay_mom_rate * interval);
}

double LrSchedule::LrAt(int64_t it) const {
  switch (c_.type) {
    case SchedulerType::kNone:
      return optimizer_lr_;
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR: {
      if (it < 0) return c_.warmup_min_lr;
      double gamma = WarmupGamma(it);
      const int64_t warmup = std::max<int64_t>(2, c_.warmup_num_steps);
      if (c_.type == SchedulerType::kWarmupDecayLR && it >= warmup) {
        const double total = static_cast<double>(*c_.total_num_steps);
        gamma = std::max(0.0, (total - static_cast<double>(it)) /
                                  std::max(1.0, total - static_cast<double>(warmup)));
      }
      return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * gamma;
    }
    case SchedulerType::kWarmupCosineLR: {
      if (it < 0) return 0.0;
      const int64_t warmup = std::max<int64_t>(2, c_.warmup_num_steps);
      double ratio;
      if (it < warmup) {
        ratio = c_.warmup_min_ratio + WarmupGamma(it) * (1.0 - c_.warmup_min_ratio);
      } else {
        const double done = static_cast<double>(it - warmup + 1);
        const double span = static_cast<double>(std::max<int64_t>(1, *c_.total_num_steps - warmup));
        const double progress = std::min(1.0, done / span);
        ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) *
                                                     (1.0 + std::cos(std::numbers::pi * progress)) /
                                                     2.0);
      }
      return optimizer_lr_ * ratio;
    }
    case SchedulerType::kOneCycle: {
      if (it < 0) return c_.cycle_min_lr;
      const double total =
          static_cast<double>(c_.cycle_first_step_size + c_.cycle_second_step_size);
      if (static_cast<double>(it) < total) {
        return c_.cycle_min_lr + (c_.cycle_max_lr - c_.cycle_min_lr) * OneCycleScale(it);
      }
      if (c_.decay_step_size == 0 || c_.decay_lr_rate == 0) return c_.cycle_min_lr;
      const double interval =
          (static_cast<double>(it) - total + 1.0) / static_cast<double>(c_.decay_step_size);
      return c_.cycle_min_lr / (1.0 + c_.decay_lr_rate * interval);
    }
    case SchedulerType::kLRRangeTest: {
      if (it < 0) return c_.lr_range_test_min_lr;
      double interval =
          static_cast<double>(it + 1) / static_cast<double>(c_.lr_range_test_step_size);
      if (c_.lr_range_test_staircase) interval = std::floor(interval);
      return c_.lr_range_test_min_lr * (1.0 + c_.lr_range_test_step_rate * interval);
    }
  }
  return optimizer_lr_;
}

// A resumed DeepSpeed run restores the optimizer's LR as last set, i.e. the schedule at
// last_batch_iteration, so fresh and resumed runs follow the same rule.
double LrSchedule::LrForStep(int64_t applied_steps) const {
  return LrAt(c_.last_batch_iteration + applied_steps);
}

double LrSchedule::Beta1ForStep(int64_t applied_steps) const {
  return OneCycleBeta1(c_.last_batch_iteration + applied_steps).value_or(optimizer_beta1_);
}

}  // namespace strata
