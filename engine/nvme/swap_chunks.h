// The NVMe optimizer's swap chunks (strata.swap_chunk_bytes): with offload_optimizer.device =
// nvme the sub-groups (`sub_group_size`) are cut into chunks of at most this many bytes of fp32
// master + exp_avg + exp_avg_sq, and every chunk is its own swap extent, read, updated (Adam is
// element-wise: the same bits whatever the cut) and written as a unit. So the pinned swap buffers
// are buffer_count x the chunk, whatever sub_group_size is: a sub_group_size of 1e9 (DeepSpeed's
// default) changes how much the step moves per sub-group, not the pinned memory. The engine, the
// overlapped step and the memory plan all take the sub-groups from OptimizerSubGroups.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/base/partition.h"
#include "engine/config/config.h"

namespace strata {

// Elements of one chunk of `chunk_bytes` (12 B an element): the most whose three fp32 parts,
// each padded to 4 KiB for O_DIRECT (OptimizerSwapper's PartBytes), fit in chunk_bytes, so the
// pinned swap buffers are buffer_count x chunk_bytes when the chunk is a whole number of the
// pool's 2 MiB pages (offload/pinned_pool.h), and not a page more: a multiple of 1024 (4 KiB of
// fp32). Under 12 KiB a chunk holds less than a page a part: a multiple of 64, at least 64 (the
// parts then pad past chunk_bytes).
// Before, every chunk was a multiple of 64 only, so the padding of its three parts took it past
// the chunk and the pool rounded each buffer up a page: 64 MiB (the default) gave 66 MiB buffers,
// 8 MiB gave 10 MiB (25% past the budget the user set).
inline size_t SwapChunkNumel(uint64_t chunk_bytes) {
  constexpr uint64_t kPage = 4096 / sizeof(float), kGrain = 64;
  const uint64_t per_part = chunk_bytes / 12;
  if (per_part >= kPage) return static_cast<size_t>(per_part / kPage * kPage);
  return static_cast<size_t>(std::max<uint64_t>(per_part / kGrain, 1) * kGrain);
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
