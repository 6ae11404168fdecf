#include "engine/config/deepspeed/scheduler_config.h"

#include <vector>

namespace strata {

std::string_view SchedulerTypeName(SchedulerType t) {
  switch (t) {
    case SchedulerType::kNone:
      return "none";
    case SchedulerType::kWarmupLR:
      return "WarmupLR";
    case SchedulerType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR:
      return "WarmupCosineLR";
    case SchedulerType::kOneCycle:
      return "OneCycle";
    case SchedulerType::kLRRangeTest:
      return "LRRangeTest";
  }
  return "?";
}

namespace internal {
namespace {

void ReadTotalSteps(const Section& params, SchedulerConfig* out) {
  ConfigContext* ctx = params.ctx();
  const std::string p = params.KeyPath("total_num_steps");
  int64_t v = 0;
  Got g = params.Int("total_num_steps", &v, 1, Section::kMaxInt, /*auto_ok=*/true);
  if (g == Got::kValue) {
    out->total_num_steps = v;
  } else if (g == Got::kAbsent) {
    ctx->Error(p, "missing: " + std::string(SchedulerTypeName(out->type)) +
                      " needs the run length in steps (a number, or \"auto\" to take the run's)");
  } else if (g == Got::kAuto) {
    if (ctx->run().total_num_steps) {
      out->total_num_steps = *ctx->run().total_num_steps;
      ctx->SetOrigin(p, OriginKind::kAuto,
                     "from the run, --total-steps " + std::to_string(*out->total_num_steps));
    } else if (ctx->run().require_run_values) {
      ctx->Error(p,
                 "is \"auto\" but the run does not say how many steps it has: write a number "
                 "or give the run's step count (strata train --steps)");
    } else {
      ctx->SetOrigin(p, OriginKind::kAuto,
                     "the run's step count (unknown here; --total-steps resolves it)");
    }
  }
}

void ReadWarmup(const Section& params, double optimizer_lr, SchedulerConfig* out) {
  ConfigContext* ctx = params.ctx();
  if (params.Double("warmup_min_lr", &out->warmup_min_lr, 0.0, Section::kInf, true) == Got::kAuto) {
    ctx->SetOrigin(params.KeyPath("warmup_min_lr"), OriginKind::kAuto, "0");
  }
  out->warmup_max_lr = optimizer_lr;
  Got g = params.Double("warmup_max_lr", &out->warmup_max_lr, 0.0, Section::kInf, true);
  if (g == Got::kAuto || g == Got::kAbsent) {
    ctx->SetOrigin(params.KeyPath("warmup_max_lr"),
                   g == Got::kAuto ? OriginKind::kAuto : OriginKind::kDefault,
                   "the optimizer's lr");
  }
  if (ctx->run().warmup_num_steps) out->warmup_num_steps = *ctx->run().warmup_num_steps;
  if (params.Int("warmup_num_steps", &out->warmup_num_steps, 0, Section::kMaxInt, true) ==
      Got::kAuto) {
    ctx->SetOrigin(
        params.KeyPath("warmup_num_steps"), OriginKind::kAuto,
        ctx->run().warmup_num_steps ? "from the run, --warmup-steps" : "DeepSpeed's default 1000");
  }
  params.Enum("warmup_type", &out->warmup_type, {"log", "linear"});
}

}  // namespace

void ReadScheduler(const Section& top, double optimizer_lr, SchedulerConfig* out) {
  ConfigContext* ctx = top.ctx();
  Section sched = top.Object("scheduler");
  if (!sched.present()) return;
  sched.CheckKeys({"type", "params"});
  std::string type;
  if (!sched.Has("type")) {
    ctx->Error(sched.KeyPath("type"),
               "missing: one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
    return;
  }
  if (sched.Enum("type", &type,
                 {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}) !=
      Got::kValue) {
    return;
  }
  if (type == "WarmupLR") out->type = SchedulerType::kWarmupLR;
  if (type == "WarmupDecayLR") out->type = SchedulerType::kWarmupDecayLR;
  if (type == "WarmupCosineLR") out->type = SchedulerType::kWarmupCosineLR;
  if (type == "OneCycle") out->type = SchedulerType::kOneCycle;
  if (type == "LRRangeTest") out->type = SchedulerType::kLRRangeTest;

  Section params = sched.Object("params");
  params.Int("last_batch_iteration", &out->last_batch_iteration, -1);
  switch (out->type) {
    case SchedulerType::kWarmupLR:
      params.CheckKeys({"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                        "last_batch_iteration"});
      ReadWarmup(params, optimizer_lr, out);
      break;
    case SchedulerType::kWarmupDecayLR:
      params.CheckKeys({"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                        "warmup_type", "last_batch_iteration"});
      ReadWarmup(params, optimizer_lr, out);
      ReadTotalSteps(params, out);
      break;
    case SchedulerType::kWarmupCosineLR:
      params.CheckKeys({"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
                        "warmup_type", "last_batch_iteration"},
                       {{"warmup_min_lr",
                         "WarmupCosineLR takes ratios of the optimizer's lr: "
                         "use 'warmup_min_ratio'"},
                        {"warmup_max_lr",
                         "WarmupCosineLR warms up to the optimizer's lr; "
                         "remove it"}});
      params.Double("warmup_min_ratio", &out->warmup_min_ratio, 0.0, 1.0);
      params.Double("cos_min_ratio", &out->cos_min_ratio, 0.0, 1.0);
      if (ctx->run().warmup_num_steps) out->warmup_num_steps = *ctx->run().warmup_num_steps;
      params.Int("warmup_num_steps", &out->warmup_num_steps, 0, Section::kMaxInt, true);
      params.Enum("warmup_type", &out->warmup_type, {"log", "linear"});
      ReadTotalSteps(params, out);
      break;
    case SchedulerType::kOneCycle: {
      params.CheckKeys({"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size",
                        "cycle_second_step_size", "cycle_first_stair_count",
                        "cycle_second_stair_count", "decay_step_size", "cycle_momentum",
                        "cycle_min_mom", "cycle_max_mom", "decay_mom_rate",
                        "last_batch_iteration"});
      for (const char* k : {"cycle_min_lr", "cycle_max_lr"}) {
        if (!params.Has(k)) {
          ctx->Error(params.KeyPath(k), "missing: OneCycle needs cycle_min_lr and cycle_max_lr");
        }
      }
      params.Double("cycle_min_lr", &out->cycle_min_lr, 0.0);
      params.Double("cycle_max_lr", &out->cycle_max_lr, 0.0);
      params.Double("decay_lr_rate", &out->decay_lr_rate, 0.0);
      params.Int("cycle_first_step_size", &out->cycle_first_step_size, 1);
      out->cycle_second_step_size = out->cycle_first_step_size;
      if (params.Int("cycle_second_step_size", &out->cycle_second_step_size, 1) == Got::kAbsent) {
        ctx->SetOrigin(params.KeyPath("cycle_second_step_size"), OriginKind::kDefault,
                       "= cycle_first_step_size");
      }
      params.Int("cycle_first_stair_count", &out->cycle_first_stair_count, 0);
      out->cycle_second_stair_count = out->cycle_first_stair_count;
      if (params.Int("cycle_second_stair_count", &out->cycle_second_stair_count, 0) ==
          Got::kAbsent) {
        ctx->SetOrigin(params.KeyPath("cycle_second_stair_count"), OriginKind::kDefault,
                       "= cycle_first_stair_count");
      }
      params.Int("decay_step_size", &out->decay_step_size, 0);
      params.Bool("cycle_momentum", &out->cycle_momentum);
      params.Double("cycle_min_mom", &out->cycle_min_mom, 0.0, 1.0);
      params.Double("cycle_max_mom", &out->cycle_max_mom, 0.0, 1.0);
      params.Double("decay_mom_rate", &out->decay_mom_rate, 0.0);
      if (out->cycle_max_lr < out->cycle_min_lr) {
        ctx->Error(params.KeyPath("cycle_max_lr"), "is below cycle_min_lr");
      }
      break;
    }
    case SchedulerType::kLRRangeTest:
      params.CheckKeys({"lr_range_test_min_lr", "lr_range_test_step_size",
                        "lr_range_test_step_rate", "lr_range_test_staircase",
                        "last_batch_iteration"});
      params.Double("lr_range_test_min_lr", &out->lr_range_test_min_lr, 0.0);
      params.Int("lr_range_test_step_size", &out->lr_range_test_step_size, 1);
      params.Double("lr_range_test_step_rate", &out->lr_range_test_step_rate, 0.0);
      params.Bool("lr_range_test_staircase", &out->lr_range_test_staircase);
      break;
    case SchedulerType::kNone:
      break;
  }
  if (out->type == SchedulerType::kWarmupLR || out->type == SchedulerType::kWarmupDecayLR) {
    if (out->warmup_max_lr < out->warmup_min_lr) {
      ctx->Error(params.KeyPath("warmup_max_lr"),
                 "is below warmup_min_lr: warmup would lower the learning rate");
    }
  }
}

}  // namespace internal
}  // namespace strata
