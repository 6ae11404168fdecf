// The NVMe optimizer's swap chunks (strata.swap_chunk_bytes): with offload_optimizer.device =
// nvme the sub-groups (`sub_group_size`) are cut into chunks of at most this many bytes of fp32
// master + exp_avg + exp_avg_sq, and every chunk is its own swap extent, read, updated (Adam is
// element-wise: the same bits whatever the cut) and written as a unit. So the pinned swap buffers
// are a count of chunks (buffer_count of them, or under "auto" the same bytes in finer chunks),
// whatever sub_group_size is: a sub_group_size of 1e9 (DeepSpeed's default) changes how much the
// step moves per sub-group, not the pinned memory. The engine, the overlapped step and the memory
// plan all take the chunks and the count from PlanOptimizerSwap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/base/partition.h"
#include "engine/config/config.h"
#include "swap/optimizer_swapper.h"

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

// The optimizer's swap units and the pinned buffers that hold them (offload_optimizer nvme).
struct OptimizerSwapPlan {
  std::vector<SubGroup> groups;  // the sub-groups, cut into swap chunks when the state is on NVMe
  uint64_t chunk_bytes = 0;      // the chunk they were cut at (0: not cut)
  int64_t buffer_count = 0;      // the swapper's pinned buffers, each the largest chunk's state
};

// Note [Auto swap chunks]: strata.swap_chunk_bytes "auto" (the default) pins what
// offload_optimizer.buffer_count buffers of 64 MiB chunks would (DeepSpeed's 4: 256 MiB), cut
// finer: 32 MiB chunks, and as many buffers of them as fit in those bytes (8 for 4). A model whose
// largest sub-group is under 32 MiB of state is cut the same way at both sizes and keeps
// buffer_count. Finer units at the same bytes let more of the next forward's states stay across
// the step and the last update wait for a smaller state: bench/overlap measured the io step 10%
// and the nvme step 13% shorter, balanced alike, compute within its spread, and 10-20% fewer NVMe
// bytes (docs/infinity.md, "Finer swap units at the same pinned bytes"). Where the buffers would
// pass the swapper's kMaxBufferCount the 64 MiB chunks stay. An explicit size keeps buffer_count
// buffers of that chunk, as before.
inline constexpr uint64_t kAutoSwapChunkBytes = uint64_t{32} << 20;
inline constexpr uint64_t kAutoSwapBufferChunkBytes = uint64_t{64} << 20;

// Bytes of one chunk's pinned buffer: three fp32 parts, each padded to 4 KiB (OptimizerSwapper).
inline uint64_t SwapStateExtentBytes(uint64_t numel) {
  constexpr uint64_t kAlign = 4096;
  return 3 * ((numel * sizeof(float) + kAlign - 1) / kAlign * kAlign);
}

inline uint64_t LargestSubGroupNumel(const std::vector<SubGroup>& groups) {
  uint64_t n = 0;
  for (const SubGroup& g : groups) n = std::max<uint64_t>(n, g.numel());
  return n;
}

// layout.SubGroups(sub_group_size), cut into swap chunks when offload_optimizer.device is nvme,
// with the buffer count the swapper pins (Note [Auto swap chunks]).
inline OptimizerSwapPlan PlanOptimizerSwap(const PartitionLayout& layout, const Config& config) {
  const ZeroConfig& z = config.zero;
  OptimizerSwapPlan plan;
  plan.buffer_count = z.offload_optimizer.buffer_count;
  plan.groups = layout.SubGroups(static_cast<size_t>(std::max<int64_t>(z.sub_group_size, 0)));
  if (z.offload_optimizer.device != OffloadDevice::kNvme) return plan;
  const std::vector<SubGroup> groups = std::move(plan.groups);
  auto cut = [&](uint64_t chunk_bytes) {
    plan.chunk_bytes = chunk_bytes;
    plan.groups = layout.SplitSubGroups(groups, SwapChunkNumel(chunk_bytes));
  };
  if (!config.strata.swap_chunk_auto) {
    cut(config.strata.swap_chunk_bytes);
    return plan;
  }
  cut(kAutoSwapBufferChunkBytes);
  if (plan.buffer_count < 1) return plan;  // refused where the options are made
  const uint64_t pinned = static_cast<uint64_t>(plan.buffer_count) *
                          SwapStateExtentBytes(LargestSubGroupNumel(plan.groups));
  std::vector<SubGroup> fine = layout.SplitSubGroups(groups, SwapChunkNumel(kAutoSwapChunkBytes));
  const uint64_t fine_extent = SwapStateExtentBytes(LargestSubGroupNumel(fine));
  const uint64_t count = fine_extent == 0 ? 0 : pinned / fine_extent;
  if (count < static_cast<uint64_t>(plan.buffer_count) ||
      count > OptimizerSwapperOptions::kMaxBufferCount) {
    return plan;
  }
  plan.chunk_bytes = kAutoSwapChunkBytes;
  plan.groups = std::move(fine);
  plan.buffer_count = static_cast<int64_t>(count);
  return plan;
}

// The sub-groups the optimizer steps: PlanOptimizerSwap's.
inline std::vector<SubGroup> OptimizerSubGroups(const PartitionLayout& layout,
                                                const Config& config) {
  return PlanOptimizerSwap(layout, config).groups;
}

}  // namespace strata
