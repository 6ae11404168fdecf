#include "engine/config/deepspeed/precision_config.h"

#include <string>

namespace strata::internal {
namespace {

void ReadEnabled(const Section& s, bool* enabled, const char* precision) {
  ConfigContext* ctx = s.ctx();
  if (s.Bool("enabled", enabled, /*auto_ok=*/true) == Got::kAuto) {
    const auto& p = ctx->run().precision;
    *enabled = p && *p == precision;
    ctx->SetOrigin(
        s.KeyPath("enabled"), OriginKind::kAuto,
        p ? "from the run, --precision " + *p
          : std::string("false (strata train --precision ") + precision + " turns it on)");
  }
}

}  // namespace

void ReadPrecision(const Section& top, Fp16Config* fp16, Bf16Config* bf16) {
  ConfigContext* ctx = top.ctx();
  Section f = top.Object("fp16");
  f.CheckKeys(
      {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
       "hysteresis", "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"},
      {{"bf16_master_weights_and_grads", "a bf16 key; it belongs under 'bf16'"},
       {"immediate_grad_update", "a bf16 key; it belongs under 'bf16'"}});
  ReadEnabled(f, &fp16->enabled, "fp16");
  f.Bool("auto_cast", &fp16->auto_cast);
  f.Double("loss_scale", &fp16->loss_scale, 0.0);
  f.Int("initial_scale_power", &fp16->initial_scale_power, 0, 63);
  f.Int("loss_scale_window", &fp16->loss_scale_window, 1);
  f.Int("hysteresis", &fp16->hysteresis, 1);
  f.Bool("consecutive_hysteresis", &fp16->consecutive_hysteresis);
  f.Double("min_loss_scale", &fp16->min_loss_scale, 1e-300);
  bool master16 = false;
  if (f.Bool("fp16_master_weights_and_grads", &master16) == Got::kValue && master16) {
    ctx->Error(f.KeyPath("fp16_master_weights_and_grads"),
               "= true keeps fp16 master weights, which changes the update; Strata keeps fp32 "
               "master weights (set it false or remove it)");
  }

  // `bfloat16` is the old name; DeepSpeed reads `bf16` first.
  const bool has_new = top.Has("bf16"), has_old = top.Has("bfloat16");
  const char* name = has_new || !has_old ? "bf16" : "bfloat16";
  if (has_new && has_old) {
    ctx->Error("bfloat16", "both 'bf16' and its old name 'bfloat16' are given; keep 'bf16'");
  } else if (has_old) {
    ctx->Warning("bfloat16", "'bfloat16' is the old name of 'bf16'; read as 'bf16'");
  }
  Section b = top.Object(name);
  const std::string_view fp16_only =
      "an fp16 loss-scaling key; bf16 needs no loss scaling (remove it or move it to 'fp16')";
  b.CheckKeys({"enabled", "immediate_grad_update", "check_grad_overflow", "check_overflow",
               "bf16_master_weights_and_grads", "bf16_optimizer_states"},
              {{"loss_scale", fp16_only},
               {"initial_scale_power", fp16_only},
               {"loss_scale_window", fp16_only},
               {"hysteresis", fp16_only},
               {"consecutive_hysteresis", fp16_only},
               {"min_loss_scale", fp16_only},
               {"auto_cast", "an fp16 key; it belongs under 'fp16'"},
               {"fp16_master_weights_and_grads", "an fp16 key; it belongs under 'fp16'"}});
  ReadEnabled(b, &bf16->enabled, "bf16");
  b.Bool("immediate_grad_update", &bf16->immediate_grad_update);
  if (b.Has("check_grad_overflow") && b.Has("check_overflow")) {
    ctx->Error(b.KeyPath("check_overflow"),
               "'check_overflow' is the old name of 'check_grad_overflow'; give one");
  }
  b.Bool("check_grad_overflow", &bf16->check_grad_overflow);
  b.Bool("check_overflow", &bf16->check_grad_overflow);
  for (const char* k : {"bf16_master_weights_and_grads", "bf16_optimizer_states"}) {
    bool v = false;
    if (b.Bool(k, &v) == Got::kValue && v) {
      ctx->Error(b.KeyPath(k),
                 "= true keeps bf16 master weights or optimizer state, which "
                 "changes the update; Strata keeps them in fp32");
    }
  }
  if (name == std::string("bfloat16")) {  // report values under the canonical path
    ctx->SetOrigin("bf16.enabled", OriginKind::kDeprecated, "bfloat16.enabled");
  }

  if (fp16->enabled && bf16->enabled) {
    ctx->Error(std::string(name) + ".enabled",
               "fp16 and bf16 are both enabled; DeepSpeed refuses this too: enable one");
  }
}

}  // namespace strata::internal
