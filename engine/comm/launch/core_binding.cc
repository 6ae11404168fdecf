#include "engine/comm/launch/core_binding.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace strata {

Result<std::string> BindToCoreShare(int local_rank, int local_world) {
  if (local_world < 1 || local_rank < 0 || local_rank >= local_world) {
    return InvalidArgumentError("core binding: local rank " + std::to_string(local_rank) +
                                " not in [0, " + std::to_string(local_world) + ")");
  }
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    return UnavailableError("core binding: hwloc cannot read the topology");
  }
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  hwloc_bitmap_t chosen = hwloc_bitmap_alloc();
  Result<std::string> result = UnavailableError("core binding: no usable core");
  if (hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) != 0) {
    hwloc_bitmap_copy(allowed, hwloc_topology_get_allowed_cpuset(topo));
  }
  std::vector<hwloc_obj_t> cores;
  for (hwloc_obj_t c = nullptr;
       (c = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, c)) != nullptr;) {
    if (hwloc_bitmap_intersects(c->cpuset, allowed)) cores.push_back(c);
  }
  const int n = static_cast<int>(cores.size());
  if (n > 0) {
    int first = 0, count = 1;
    if (n >= local_world) {
      first = static_cast<int>(static_cast<long>(n) * local_rank / local_world);
      count = static_cast<int>(static_cast<long>(n) * (local_rank + 1) / local_world) - first;
    } else {
      first = local_rank % n;
    }
    for (int i = first; i < first + count; ++i) hwloc_bitmap_or(chosen, chosen, cores[i]->cpuset);
    hwloc_bitmap_and(chosen, chosen, allowed);
    if (hwloc_set_cpubind(topo, chosen, HWLOC_CPUBIND_PROCESS) != 0) {
      result =
          UnavailableError(std::string("core binding: hwloc_set_cpubind: ") + std::strerror(errno));
    } else {
      result = "core" + std::string(count > 1 ? "s " : " ") + std::to_string(first) +
               (count > 1 ? "-" + std::to_string(first + count - 1) : "") + " of " +
               std::to_string(n);
    }
  }
  hwloc_bitmap_free(chosen);
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topo);
  return result;
}

}  // namespace strata
