// The NVMe optimizer's swap chunks (strata.swap_chunk_bytes): with offload_optimizer.device =
// nvme the sub-groups (`sub_group_size`) are cut into chunks of at most this many bytes of fp32
// master + exp_avg + exp_avg_sq, and every chunk is its own swap extent, read, updated (Adam is
// element-wise: the same bits whatever the cut) and written as a unit. So the pinned swap buffers
// are buffer_count x the chunk, whatever sub_group_size is: a sub_group_size of 1e9 (DeepSpeed's
// default) changes how much the step moves per sub-group, not the pinned memory. The engine, the
// overlapped step and the memory plan all take the sub-groups from NvmeSwapUnits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/base/partition.h"
#include "engine/config/config.h"

namespace strata {

// Elements of one chunk of `chunk_bytes` (12 B an element), a multiple of 64, at least 64.
inline size_t SwapChunkNumel(uint64_t chunk_bytes) {
  constexpr uint64_t kGrain = 64;
  return static_cast<size_t>(std::max<uint64_t>(chunk_bytes / 12 / kGrain, 1) * kGrain);
}

// The sub-groups the optimizer steps: layout.SubGroups(sub_group_size), cut into swap chunks
// when offload_optimizer.device is nvme.
inline std::vector<SubGroup> OptimizerSubGroups(const PartitionLayout& layout,
                                                const Config& config) {
  const ZeroConfig& z = config.zero;
  std::vector<SubGroup> groups =
      layout.SubGroups(static_cast<size_t>(std::max<int64_t>(z.sub_group_size, 0)));
  if (z.offload_optimizer.device != OffloadDevice::kNvme) return groups;
  return layout.SplitSubGroups(groups, SwapChunkNumel(config.strata.swap_chunk_bytes));
}

}  // namespace strata
