#include "engine/config/deepspeed/activation_checkpointing_config.h"

namespace strata::internal {

void ReadActivationCheckpointing(const Section& top, ActivationCheckpointingConfig* out) {
  Section s = top.Object("activation_checkpointing");
  s.CheckKeys({"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
               "number_checkpoints", "synchronize_checkpoint_boundary", "profile"});
  s.Bool("partition_activations", &out->partition_activations);
  s.Bool("contiguous_memory_optimization", &out->contiguous_memory_optimization);
  s.Bool("cpu_checkpointing", &out->cpu_checkpointing);
  const Json* n = s.Get("number_checkpoints");
  if (n && !n->is_null()) {
    int64_t v = 0;
    if (s.Int("number_checkpoints", &v, 1) == Got::kValue) out->number_checkpoints = v;
  } else {
    s.ctx()->SetOrigin(s.KeyPath("number_checkpoints"), OriginKind::kDefault,
                       "the model's layer count");
  }
  s.Bool("synchronize_checkpoint_boundary", &out->synchronize_checkpoint_boundary);
  s.Bool("profile", &out->profile);
  if (out->cpu_checkpointing && !out->partition_activations) {
    s.ctx()->Error(s.KeyPath("cpu_checkpointing"),
                   "needs partition_activations = true (DeepSpeed: CPU checkpointing is only "
                   "available with partitioned activations)");
  }
}

}  // namespace strata::internal
