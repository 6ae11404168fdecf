#include "engine/config/deepspeed/optimizer_config.h"

#include <algorithm>
#include <string>
#include <vector>

namespace strata {

std::string_view OptimizerTypeName(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kAdagrad:
      return "Adagrad";
    case OptimizerType::kLion:
      return "Lion";
  }
  return "?";
}

namespace internal {
namespace {

// Optimizers DeepSpeed knows that Strata does not implement (their math differs).
const std::vector<std::string_view> kOtherDeepSpeedOptimizers = {
    "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "MuAdam", "MuAdamW", "MuSGD", "Muon"};

// Keys of torch.optim / DeepSpeed optimizers that do not change the update (implementation
// choices); accepted and not used.
const std::vector<std::string_view> kImplementationKeys = {
    "fused", "foreach", "capturable", "differentiable", "set_grad_none", "fp32_optimizer_states"};

// Keys that change the math in ways Strata does not implement: an error when not at their
// neutral value.
struct MathKey {
  std::string_view key;
  double neutral;
};

void ReadBetas(const Section& params, OptimizerConfig* out) {
  ConfigContext* ctx = params.ctx();
  const std::string p = params.KeyPath("betas");
  const Json* v = params.Get("betas");
  if (!v) {
    ctx->SetOrigin(p, OriginKind::kDefault);
    return;
  }
  if (params.IsAuto("betas")) {
    ctx->SetOrigin(p, OriginKind::kAuto, "default [0.9, 0.999]");
    return;
  }
  if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()) {
    ctx->Error(p, "must be two numbers [beta1, beta2], got " + v->dump());
    return;
  }
  double b1 = (*v)[0].get<double>(), b2 = (*v)[1].get<double>();
  if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1) {
    ctx->Error(p, "= " + v->dump() + ": each beta must be in [0, 1)");
    return;
  }
  out->beta1 = b1;
  out->beta2 = b2;
  ctx->SetOrigin(p, OriginKind::kFile);
}

}  // namespace

void ReadOptimizer(const Section& top, OptimizerConfig* out) {
  ConfigContext* ctx = top.ctx();
  Section opt = top.Object("optimizer");
  out->from_file = opt.present();
  if (!opt.present()) {
    ctx->SetOrigin("optimizer.type", OriginKind::kDefault,
                   "no optimizer section: AdamW, as the Hugging Face Trainer uses");
    if (ctx->run().learning_rate) {
      ctx->SetOrigin("optimizer.params.lr", OriginKind::kRun, "--lr");
    } else {
      ctx->SetOrigin("optimizer.params.lr", OriginKind::kDefault, "DeepSpeed's Adam default");
    }
    if (ctx->run().learning_rate) out->lr = *ctx->run().learning_rate;
    return;
  }
  opt.CheckKeys({"type", "params", "legacy_fusion"});
  bool legacy_fusion = false;
  opt.Bool("legacy_fusion", &legacy_fusion);

  std::string type;
  const Json* tv = opt.Get("type");
  if (!tv) {
    ctx->Error(opt.KeyPath("type"), "missing: one of Adam, AdamW, Adagrad, Lion");
    return;
  }
  if (!tv->is_string()) {
    ctx->Error(opt.KeyPath("type"), "must be a string, got " + tv->dump());
    return;
  }
  // DeepSpeed matches its own optimizer names ignoring case.
  std::string lower = tv->get<std::string>();
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "adam") {
    out->type = OptimizerType::kAdam;
  } else if (lower == "adamw") {
    out->type = OptimizerType::kAdamW;
  } else if (lower == "adagrad") {
    out->type = OptimizerType::kAdagrad;
  } else if (lower == "lion") {
    out->type = OptimizerType::kLion;
  } else {
    std::string m = "= " + tv->dump() + ": ";
    bool known = false;
    for (auto o : kOtherDeepSpeedOptimizers) {
      std::string lo(o);
      std::transform(lo.begin(), lo.end(), lo.begin(), ::tolower);
      known |= lo == lower;
    }
    if (known) {
      m += "a DeepSpeed optimizer Strata does not implement (its update differs); Strata "
           "implements Adam, AdamW, Adagrad and Lion";
    } else {
      m += "not an optimizer Strata implements; allowed: Adam, AdamW, Adagrad, Lion";
      std::string s = ClosestKey(tv->get<std::string>(), {"Adam", "AdamW", "Adagrad", "Lion"});
      if (!s.empty()) m += " (did you mean \"" + s + "\"?)";
    }
    ctx->Error(opt.KeyPath("type"), std::move(m));
    return;
  }
  ctx->SetOrigin("optimizer.type", OriginKind::kFile);

  Section params = opt.Object("params");
  const bool adam = out->type == OptimizerType::kAdam || out->type == OptimizerType::kAdamW;
  std::vector<std::string_view> known = {"lr", "weight_decay", "eps"};
  std::vector<MathKey> math_keys = {{"amsgrad", 0}, {"maximize", 0}};
  if (adam) {
    known.insert(known.end(), {"betas", "adam_w_mode", "bias_correction", "torch_adam"});
  } else if (out->type == OptimizerType::kLion) {
    known = {"lr", "weight_decay", "betas"};
  } else {  // Adagrad (torch.optim.Adagrad's extras too)
    math_keys.push_back({"lr_decay", 0});
    math_keys.push_back({"initial_accumulator_value", 0});
  }
  std::vector<std::string_view> all = known;
  all.insert(all.end(), kImplementationKeys.begin(), kImplementationKeys.end());
  for (const auto& m : math_keys) all.push_back(m.key);
  all.push_back("max_grad_norm");
  params.CheckKeys(all);

  if (params.Has("max_grad_norm")) {
    // Replace the generic unknown-key line with DeepSpeed's own rule.
    ctx->Error(params.KeyPath("max_grad_norm"),
               "is not an optimizer parameter (DeepSpeed rejects it too): clip with the "
               "top-level 'gradient_clipping' instead");
  }
  if (out->type == OptimizerType::kAdagrad) {
    out->lr = 1e-2;
    out->eps = 1e-10;
  }
  if (ctx->run().learning_rate) out->lr = *ctx->run().learning_rate;
  if (params.Double("lr", &out->lr, 0.0, Section::kInf, /*auto_ok=*/true) == Got::kAuto) {
    ctx->SetOrigin("optimizer.params.lr", OriginKind::kAuto,
                   ctx->run().learning_rate ? "--lr" : "the optimizer's default");
  }
  if (out->type != OptimizerType::kLion) {
    params.Double("eps", &out->eps, 0.0, Section::kInf, /*auto_ok=*/true);
  }
  if (adam || out->type == OptimizerType::kLion) ReadBetas(params, out);
  if (adam) {
    bool w_mode = true;
    params.Bool("adam_w_mode", &w_mode);
    params.Bool("bias_correction", &out->bias_correction);
    params.Bool("torch_adam", &out->torch_adam);
    out->adam_w_mode = out->type == OptimizerType::kAdamW || w_mode;
    ctx->SetOrigin("optimizer.params.adam_w_mode",
                   params.Has("adam_w_mode") ? OriginKind::kFile : OriginKind::kDefault,
                   out->type == OptimizerType::kAdamW ? "AdamW is always decoupled" : "");
    if (out->torch_adam && out->adam_w_mode) out->weight_decay = 0.01;  // torch.optim.AdamW
  }
  if (params.Double("weight_decay", &out->weight_decay, 0.0, Section::kInf, true) == Got::kAuto) {
    out->weight_decay = 0.0;
    ctx->SetOrigin("optimizer.params.weight_decay", OriginKind::kAuto,
                   "0 (the Trainer's weight_decay default)");
  }
  for (const auto& m : math_keys) {
    const Json* v = params.Get(m.key);
    if (!v) continue;
    bool is_neutral =
        (v->is_boolean() && !v->get<bool>()) || (v->is_number() && v->get<double>() == m.neutral);
    if (!is_neutral) {
      ctx->Error(params.KeyPath(m.key),
                 "= " + v->dump() + " changes the update and Strata does not implement it");
    }
  }
  for (auto k : kImplementationKeys) {
    if (params.Has(k)) {
      ctx->Note(params.KeyPath(k),
                "an implementation choice of DeepSpeed/torch; not used by "
                "Strata (the update is the same)");
    }
  }
}

}  // namespace internal
}  // namespace strata
