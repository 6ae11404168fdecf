// Which optimizer a CpuOptimizer runs and the hyperparameters of one parameter group.
//
// Names and meanings follow DeepSpeed's `optimizer` config (CONFIG.md): Adam and AdamW are one
// kernel (`adam_w_mode` selects decoupled weight decay vs L2 added to the gradient), Adagrad and
// Lion share its tiling and dispatch. The exact update rules are in docs/cpu_adam.md and in the
// double-precision oracle, reference_step.h.
#pragma once

#include <string_view>

#include "core/status.h"

namespace strata {

enum class OptimizerKind { kAdam, kAdagrad, kLion };

// "adam", "adagrad", "lion".
std::string_view OptimizerKindName(OptimizerKind kind);

struct Hyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;    // Adam: first-moment decay. Lion: interpolation for the update sign.
  float beta2 = 0.999f;  // Adam: second-moment decay. Lion: momentum decay. Unused by Adagrad.
  float eps = 1e-8f;     // Adam and Adagrad denominators. Unused by Lion.
  float weight_decay = 0.0f;
  // Adam only. true: AdamW, p *= 1 - lr * weight_decay. false: L2, g += weight_decay * p.
  // (Adagrad always uses L2 and Lion always decoupled decay, as in PyTorch and DeepSpeed.)
  bool adam_w_mode = true;
  // Adam only: divide by 1 - beta^t.
  bool bias_correction = true;
};

// PyTorch/DeepSpeed defaults: Adam(W) lr 1e-3, betas (0.9, 0.999), eps 1e-8; Adagrad lr 1e-2,
// eps 1e-10; Lion lr 1e-4, betas (0.9, 0.99).
Hyperparams DefaultHyperparams(OptimizerKind kind);

// InvalidArgument naming the field, its value and the allowed range: lr >= 0, betas in [0, 1),
// eps >= 0, weight_decay >= 0, all finite.
Status ValidateHyperparams(OptimizerKind kind, const Hyperparams& hp);

}  // namespace strata
