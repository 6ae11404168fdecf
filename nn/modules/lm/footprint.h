// What a model costs in memory, as the engine's memory plan (engine/plan/memory_plan.h) reads
// it: every parameter's size and what one micro-batch's activations need on each tier. Each model
// family reports its own (models/llama/llama_footprint.h); the plan stays model-agnostic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace strata {

// What one micro-batch's activations need (buffers the model allocates on its first Forward).
struct ActivationBytes {
  uint64_t device_bytes = 0;  // activations, their gradients, per-batch scratch
  uint64_t pinned_bytes = 0;  // checkpoints kept in CPU memory (cpu_checkpointing)
  uint64_t host_bytes = 0;    // pageable host staging of the batch (token ids, labels)
};

// A model as the planner sees it.
struct ModelShape {
  std::string name;  // for tables: "tiny", "7b", a directory
  // Every parameter's element count, in the model's parameter order.
  std::vector<uint64_t> param_numels;
  // Stage 3 gathers a module's parameters together: the parameter count of each module that
  // owns parameters directly (a decoder layer's q/k/v/o, a norm, ...). Empty: each parameter is
  // its own module.
  std::vector<uint64_t> module_numels;
  // Device memory the model holds whatever the batch (e.g. RoPE tables).
  uint64_t fixed_device_bytes = 0;
  // One micro-batch (the caller's micro batch x sequence length), with and without activation
  // checkpointing.
  ActivationBytes activations;
  ActivationBytes activations_checkpointed;
  std::string activation_note;  // e.g. "micro batch 1 x seq 2048"

  uint64_t NumParameters() const {
    return std::accumulate(param_numels.begin(), param_numels.end(), uint64_t{0});
  }
  uint64_t LargestParameter() const {
    uint64_t m = 0;
    for (uint64_t n : param_numels) m = std::max(m, n);
    return m;
  }
};

}  // namespace strata
