// `activation_checkpointing` (DeepSpeed's activation_checkpointing/config.py): how checkpointed
// activations are kept. All off by default.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/config/reader/section_reader.h"

namespace strata {

struct ActivationCheckpointingConfig {
  // Partition checkpointed activations across model-parallel ranks.
  bool partition_activations = false;
  // Copy checkpoints into one preallocated buffer (needs the number of checkpoints).
  bool contiguous_memory_optimization = false;
  // Keep partitioned checkpoints in CPU memory (needs partition_activations).
  bool cpu_checkpointing = false;
  // Checkpoints per step for contiguous_memory_optimization; unset = the model's layer count.
  std::optional<int64_t> number_checkpoints;
  // Synchronize the device at each checkpoint boundary.
  bool synchronize_checkpoint_boundary = false;
  // Time the checkpointing functions.
  bool profile = false;
};

namespace internal {
void ReadActivationCheckpointing(const Section& top, ActivationCheckpointingConfig* out);
}  // namespace internal
}  // namespace strata
