// PartitionLayout: how ZeRO splits parameters across the ranks of a data-parallel group, and
// how a rank's share is cut into optimizer sub-groups.
//
// Each parameter is split on its own into `world` shards of ShardNumel = ceil(numel / world)
// elements; rank r holds elements [r * shard, min((r + 1) * shard, numel)) and the rest of its
// shard is zero padding (DeepSpeed's stage-3 partitioning, which its checkpoint consolidation
// assumes: CONFIG.md "Checkpoint layout"). A rank's shards of all parameters lie end to end in
// one flat partition, each starting at a multiple of `align_numel` elements, so the optimizer,
// the gradient reduce-scatter and NVMe swapping all work on one contiguous buffer per rank.
// Sub-groups (the unit of CPU Adam steps and NVMe swaps, `sub_group_size`) are runs of
// consecutive parameters closed as soon as their shards reach the size, as DeepSpeed groups
// them; one parameter larger than the size is a group of its own. SplitSubGroups cuts them
// further by size for the NVMe optimizer, whose swap buffers are sized by bytes, not groups.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "core/status.h"

namespace strata {

struct ShardSlice {
  size_t param = 0;         // index in the parameter list
  size_t numel = 0;         // the whole parameter's elements
  size_t shard_numel = 0;   // ceil(numel / world): this rank's slot, padding included
  size_t param_offset = 0;  // first element of the parameter this rank holds (rank * shard)
  size_t valid_numel = 0;   // elements of the parameter in the slot (the rest is padding)
  size_t flat_offset = 0;   // where the slot starts in the rank's flat partition
};

struct SubGroup {
  size_t first_slice = 0;  // [first_slice, end_slice) of slices()
  size_t end_slice = 0;
  size_t flat_begin = 0;  // [flat_begin, flat_end) of the flat partition
  size_t flat_end = 0;
  size_t numel() const { return flat_end - flat_begin; }
};

class PartitionLayout {
 public:
  // InvalidArgument for world < 1, rank outside [0, world) or align_numel 0.
  static Result<PartitionLayout> Create(std::span<const size_t> numels, int world, int rank,
                                        size_t align_numel);

  static size_t ShardNumel(size_t numel, int world) {
    return (numel + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
  }

  int world() const { return world_; }
  int rank() const { return rank_; }
  // Length of this rank's flat partition (shards, padding and alignment gaps).
  size_t partition_numel() const { return partition_numel_; }
  const std::vector<ShardSlice>& slices() const { return slices_; }

  // Sub-groups of at least `sub_group_numel` shard elements each (the last may be smaller); one
  // group for everything when sub_group_numel is not smaller than the whole partition; one
  // parameter per group when it is 0 (DeepSpeed's meaning of sub_group_size 0).
  std::vector<SubGroup> SubGroups(size_t sub_group_numel) const;
  // `groups` (SubGroups' output) cut into pieces of at most `max_numel` elements each (the last
  // piece of a group may be shorter), in order: the NVMe optimizer's swap chunks
  // (strata.swap_chunk_bytes). A piece may start or end inside a parameter's slot: its
  // [first_slice, end_slice) are then the slices whose slots (alignment padding included) it
  // overlaps, so neighbouring pieces can share a slice. max_numel 0 leaves the groups whole.
  std::vector<SubGroup> SplitSubGroups(std::span<const SubGroup> groups, size_t max_numel) const;

 private:
  int world_ = 1;
  int rank_ = 0;
  size_t partition_numel_ = 0;
  std::vector<ShardSlice> slices_;
};

}  // namespace strata
