#include "engine/optim/loss_scaler.h"

#include <algorithm>
#include <string>

namespace strata {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  state_.scale = options.initial_scale;
  state_.hysteresis_left = options.hysteresis;
}

Result<LossScaler> LossScaler::Create(const LossScalerOptions& o) {
  if (!(o.initial_scale > 0)) {
    return InvalidArgumentError("fp16 loss scale must be > 0, got " +
                                std::to_string(o.initial_scale));
  }
  if (o.dynamic) {
    if (o.scale_window < 1) {
      return InvalidArgumentError("fp16.loss_scale_window must be >= 1, got " +
                                  std::to_string(o.scale_window));
    }
    if (o.hysteresis < 1) {
      return InvalidArgumentError("fp16.hysteresis must be >= 1, got " +
                                  std::to_string(o.hysteresis));
    }
    if (!(o.min_scale > 0) || o.min_scale > o.initial_scale) {
      return InvalidArgumentError("fp16.min_loss_scale must be in (0, initial scale " +
                                  std::to_string(o.initial_scale) + "], got " +
                                  std::to_string(o.min_scale));
    }
  }
  return LossScaler(o);
}

Status LossScaler::Update(bool overflow) {
  if (!options_.dynamic) {
    ++state_.iteration;
    return Status::Ok();
  }
  Status result;
  if (overflow) {
    if (options_.hysteresis == 1 || state_.hysteresis_left == 1) {
      if (state_.scale == options_.min_scale && options_.raise_error_at_min_scale) {
        result = AbortedError("fp16: gradients overflow at the minimum loss scale " +
                              std::to_string(options_.min_scale) +
                              " (fp16.min_loss_scale); the run cannot continue in fp16 - try "
                              "bf16, a lower learning rate or gradient_clipping");
      } else {
        state_.scale = std::max(state_.scale / 2.0, options_.min_scale);
      }
    } else {
      --state_.hysteresis_left;
    }
    state_.last_overflow_iteration = state_.iteration;
  } else {
    if (options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
    const int64_t stable = state_.iteration - state_.last_overflow_iteration - 1;
    if (stable > 0 && stable % options_.scale_window == 0) {
      if (!options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
      state_.scale *= 2.0;
    }
  }
  ++state_.iteration;
  return result;
}

}  // namespace strata
