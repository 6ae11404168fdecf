// LossScaler: fp16 loss scaling with DeepSpeed's exact semantics (runtime/fp16/loss_scaler.py),
// so a run that switches from DeepSpeed sees the same skipped steps and the same scales.
//
// Dynamic scaling: the loss is multiplied by scale() before backward; if any gradient is Inf/NaN
// the step is skipped and Update(true) either halves the scale (when the hysteresis counter is
// at 1, never below min_scale) or uses up one unit of hysteresis. After `scale_window` clean
// steps since the last overflow the scale doubles and hysteresis refills; with
// consecutive_hysteresis it refills after every clean step. An overflow already at min_scale is
// an error (DeepSpeed raises) unless raise_error_at_min_scale is false. Static scaling and
// fp32/bf16 runs use a fixed scale (1 for fp32/bf16).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace strata {

struct LossScalerOptions {
  bool dynamic = false;
  // Static: the fixed scale (fp16.loss_scale > 0). Dynamic: 2^initial_scale_power.
  double initial_scale = 1.0;
  int64_t scale_window = 1000;  // fp16.loss_scale_window
  double min_scale = 1.0;       // fp16.min_loss_scale
  int64_t hysteresis = 2;       // fp16.hysteresis (DeepSpeed's delayed_shift)
  bool consecutive_hysteresis = false;
  bool raise_error_at_min_scale = true;
};

// Everything a checkpoint needs to resume the scaler exactly.
struct LossScalerState {
  double scale = 1.0;
  int64_t iteration = 0;
  int64_t last_overflow_iteration = -1;
  int64_t hysteresis_left = 2;
};

class LossScaler {
 public:
  // InvalidArgument naming the fp16 key for a non-positive scale, window or hysteresis, or a
  // min_scale above the initial scale.
  static Result<LossScaler> Create(const LossScalerOptions& options);
  // A fixed scale of 1 (fp32 and bf16 runs).
  LossScaler() = default;

  double scale() const { return state_.scale; }
  bool dynamic() const { return options_.dynamic; }

  // Records the outcome of one optimizer step (overflow = some gradient was Inf/NaN, so the step
  // is skipped). Aborted ("loss scale already at its minimum ...") when a dynamic scaler
  // overflows at min_scale with raise_error_at_min_scale; the state still advances.
  Status Update(bool overflow);

  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& state) { state_ = state; }

 private:
  explicit LossScaler(const LossScalerOptions& options);

  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace strata
