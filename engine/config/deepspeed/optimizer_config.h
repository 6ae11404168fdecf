// The `optimizer` section: {type, params} with DeepSpeed's types, parameter names and defaults
// (FusedAdam / DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, FusedLion / DeepSpeedCPULion).
//
// DeepSpeed's "Adam" is decoupled-weight-decay Adam (AdamW) unless params.adam_w_mode is false;
// "AdamW" always is. With torch_adam, torch.optim.AdamW's weight_decay default (0.01) applies.
#pragma once

#include <string_view>

#include "engine/config/reader/section_reader.h"

namespace strata {

enum class OptimizerType { kAdam, kAdamW, kAdagrad, kLion };

// "Adam", "AdamW", "Adagrad", "Lion".
std::string_view OptimizerTypeName(OptimizerType t);

struct OptimizerConfig {
  // False: the file has no `optimizer` section and Strata uses AdamW with these defaults (what
  // the Hugging Face Trainer does without one).
  bool from_file = false;
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;  // Adagrad: 1e-2
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;  // Adagrad: 1e-10
  double weight_decay = 0.0;
  // Effective mode: true = decoupled weight decay (AdamW). Adam/AdamW only.
  bool adam_w_mode = true;
  bool bias_correction = true;
  // DeepSpeed runs torch.optim.Adam/AdamW instead of its own kernels; Strata's math is the same.
  bool torch_adam = false;
};

namespace internal {
void ReadOptimizer(const Section& top, OptimizerConfig* out);
}  // namespace internal
}  // namespace strata
