// `zero_optimization` (DeepSpeed's zero/config.py and zero/offload_config.py): the ZeRO stage,
// bucket sizes, stage-3 prefetch/persistence limits and where parameters and optimizer state are
// offloaded. Sizes are in elements unless named *_bytes.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/reader/section_reader.h"

namespace strata {

enum class OffloadDevice { kNone, kCpu, kNvme };

// "none", "cpu", "nvme".
std::string_view OffloadDeviceName(OffloadDevice d);

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  // Required for nvme. DeepSpeed takes one path; Strata also takes a list to stripe over.
  std::vector<std::string> nvme_paths;
  // Page-locked staging buffers (DeepSpeed's default since 2026-08; was false).
  bool pin_memory = true;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;  // elements; at least the largest parameter partition
  int64_t max_in_cpu = 1000000000;  // elements kept in CPU memory with nvme
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::vector<std::string> nvme_paths;
  bool pin_memory = true;
  int64_t buffer_count = 4;
  // NVMe: overlap the read of the next sub-group / the write of the previous with the step.
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  // Fraction of the optimizer state stepped on the CPU, in (0, 1]: the last sub-groups (stages
  // 1-3 with device cpu; engine/optim/partial_offload.h).
  double ratio = 1.0;
};

struct ZeroConfig {
  int64_t stage = 0;
  bool contiguous_gradients = true;
  // Unset in the file: true for stage 3, else false.
  bool overlap_comm = false;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool round_robin_gradients = false;
  int64_t sub_group_size = 1000000000;
  // Stage 3 (also spelt without the stage3_ prefix).
  int64_t prefetch_bucket_size = 50000000;  // DeepSpeed's docs say 5e8; its code 5e7
  int64_t param_persistence_threshold = 100000;
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  bool gather_16bit_weights_on_model_save = false;
  OffloadParamConfig offload_param;
  OffloadOptimizerConfig offload_optimizer;
  // Sizing keys written "auto" (canonical paths, e.g. "zero_optimization.sub_group_size"): the
  // planner chooses. The config gives each a documented value (Hugging Face's hidden-size rule or
  // DeepSpeed's default; engine/config/auto_sizes.h resolves the model-dependent ones) and the
  // report's origin says which and why.
  std::vector<std::string> auto_sizes;
  bool IsAuto(std::string_view path) const;
};

namespace internal {
// Also handles the old `"zero_optimization": true|false` form and its top-level allgather_size.
void ReadZero(const Section& top, ZeroConfig* out);
}  // namespace internal
}  // namespace strata
