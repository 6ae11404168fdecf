// RunContext: what the run knows that a config may leave to it with "auto" (as the Hugging Face
// Trainer fills DeepSpeed's "auto" values from its arguments and the model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace strata {

struct RunContext {
  // Data-parallel ranks (DeepSpeed's world size for the batch arithmetic).
  int64_t world_size = 1;

  // From `strata train` flags; unset = the flag was not given. Used for "auto" and for batch keys
  // the file leaves out.
  std::optional<int64_t> micro_batch_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;
  std::optional<double> learning_rate;
  std::optional<int64_t> warmup_num_steps;
  std::optional<int64_t> total_num_steps;
  // "fp32", "fp16" or "bf16"; fills fp16.enabled / bf16.enabled when they are "auto".
  std::optional<std::string> precision;

  // From the model: hidden size for the hidden-size-based "auto" keys (reduce_bucket_size =
  // hidden², stage3_prefetch_bucket_size = 0.9·hidden², stage3_param_persistence_threshold =
  // 10·hidden). Unset: those keys take DeepSpeed's defaults.
  std::optional<int64_t> hidden_size;

  // True for a run (strata train, the engine): a value only the run can give (e.g.
  // scheduler.params.total_num_steps = "auto") must be resolved or it is an error. False for
  // `strata config check` without the matching flag: such values are left unresolved and said so.
  bool require_run_values = true;
};

}  // namespace strata
