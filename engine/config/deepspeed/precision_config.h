// `fp16` (dynamic loss scaling) and `bf16` (old name `bfloat16`), DeepSpeed's precision_config.py.
//
// Dynamic loss scale: on overflow the step is skipped; if the hysteresis counter is at 1 the
// scale halves (not below min_loss_scale), else the counter drops by one. After
// loss_scale_window clean steps the scale doubles (and with consecutive_hysteresis the counter
// refills on every clean step).
#pragma once

#include <cstdint>

#include "engine/config/reader/section_reader.h"

namespace strata {

struct Fp16Config {
  bool enabled = false;
  // Cast the model's inputs to fp16.
  bool auto_cast = false;
  // 0 = dynamic scaling; > 0 = this static scale.
  double loss_scale = 0.0;
  int64_t initial_scale_power = 16;  // dynamic: start at 2^this
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  // DeepSpeed types it int (default 1); real configs write 1e-10, which older releases took.
  double min_loss_scale = 1.0;
};

struct Bf16Config {
  bool enabled = false;
  // Apply each micro-step's gradient to the fp32 accumulator at once (DeepSpeed's BF16
  // optimizer option; same math).
  bool immediate_grad_update = false;
  // Check bf16 gradients for inf/nan and skip the step (no loss scaling in bf16).
  bool check_grad_overflow = false;
};

namespace internal {
void ReadPrecision(const Section& top, Fp16Config* fp16, Bf16Config* bf16);
}  // namespace internal
}  // namespace strata
