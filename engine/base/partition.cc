#include "engine/base/partition.h"

#include <algorithm>
#include <string>

namespace strata {

Result<PartitionLayout> PartitionLayout::Create(std::span<const size_t> numels, int world, int rank,
                                                size_t align_numel) {
  if (world < 1) return InvalidArgumentError("partition: world size must be >= 1");
  if (rank < 0 || rank >= world) {
    return InvalidArgumentError("partition: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(world) + ")");
  }
  if (align_numel == 0) return InvalidArgumentError("partition: alignment must be >= 1 element");
  PartitionLayout layout;
  layout.world_ = world;
  layout.rank_ = rank;
  layout.slices_.reserve(numels.size());
  size_t offset = 0;
  for (size_t p = 0; p < numels.size(); ++p) {
    ShardSlice s;
    s.param = p;
    s.numel = numels[p];
    s.shard_numel = ShardNumel(s.numel, world);
    s.param_offset = std::min(s.numel, static_cast<size_t>(rank) * s.shard_numel);
    s.valid_numel = std::min(s.shard_numel, s.numel - s.param_offset);
    s.flat_offset = offset;
    offset += (s.shard_numel + align_numel - 1) / align_numel * align_numel;
    layout.slices_.push_back(s);
  }
  layout.partition_numel_ = offset;
  return layout;
}

std::vector<SubGroup> PartitionLayout::SubGroups(size_t sub_group_numel) const {
  std::vector<SubGroup> groups;
  if (slices_.empty()) return groups;
  size_t total_shards = 0;
  for (const ShardSlice& s : slices_) total_shards += s.shard_numel;
  // 0 closes a group after every parameter (DeepSpeed: a group closes once it holds >= 0).
  if (sub_group_numel > 0 && sub_group_numel >= total_shards) {
    groups.push_back({0, slices_.size(), 0, partition_numel_});
    return groups;
  }
  size_t first = 0, running = 0;
  for (size_t i = 0; i < slices_.size(); ++i) {
    running += slices_[i].shard_numel;
    if (running >= sub_group_numel || i + 1 == slices_.size()) {
      size_t end = i + 1 < slices_.size() ? slices_[i + 1].flat_offset : partition_numel_;
      groups.push_back({first, i + 1, slices_[first].flat_offset, end});
      first = i + 1;
      running = 0;
    }
  }
  return groups;
}

std::vector<SubGroup> PartitionLayout::SplitSubGroups(std::span<const SubGroup> groups,
                                                      size_t max_numel) const {
  std::vector<SubGroup> out;
  if (max_numel == 0) return {groups.begin(), groups.end()};
  // Slot s (with its alignment padding) is [flat_offset(s), flat_offset(s + 1)).
  auto slot_end = [&](size_t s) {
    return s + 1 < slices_.size() ? slices_[s + 1].flat_offset : partition_numel_;
  };
  for (const SubGroup& g : groups) {
    if (g.flat_end - g.flat_begin <= max_numel) {
      out.push_back(g);
      continue;
    }
    size_t first = g.first_slice;
    for (size_t b = g.flat_begin; b < g.flat_end;) {
      const size_t e = std::min(g.flat_end, b + max_numel);
      while (first + 1 < g.end_slice && slot_end(first) <= b) ++first;
      size_t last = first;
      while (last + 1 < g.end_slice && slot_end(last) < e) ++last;
      out.push_back({first, last + 1, b, e});
      b = e;
    }
  }
  return out;
}

}  // namespace strata
