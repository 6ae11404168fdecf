// The top-level training keys: the three batch sizes (any two give the third, checked against
// the data-parallel world size as DeepSpeed does) and the scalar knobs beside them.
#pragma once

#include <cstdint>

#include "engine/config/reader/section_reader.h"

namespace strata {

struct BatchConfig {
  // train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world.
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t world_size = 1;
};

struct TrainingConfig {
  // Global L2-norm clip; 0 disables. DeepSpeed's default is 1.0 since 0.19.3 (was 0).
  double gradient_clipping = 1.0;
  // Divide gradients by the world size before the reduction instead of after.
  bool prescale_gradients = false;
  // Divide by this before the all-reduce and by world/factor after.
  double gradient_predivide_factor = 1.0;
  // DeepSpeed's constant is 10 in the releases Strata follows (shared/CONFIG.md).
  int64_t steps_per_print = 10;
  // Per-phase timings.
  bool wall_clock_breakdown = false;
};

// Strata's micro batch when the batch keys are "auto" and the run gives none (accumulation then
// derives as 1, DeepSpeed's rule for a lone micro batch).
inline constexpr int64_t kDefaultMicroBatchPerGpu = 1;

namespace internal {

// Reads and resolves the batch keys of the top level `top` (errors show the arithmetic).
void ReadBatch(const Section& top, BatchConfig* out);
// gradient_clipping, prescale_gradients, gradient_predivide_factor, steps_per_print,
// wall_clock_breakdown.
void ReadTrainingScalars(const Section& top, TrainingConfig* out);

}  // namespace internal
}  // namespace strata
