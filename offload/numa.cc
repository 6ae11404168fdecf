#include "offload/numa.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace strata {
namespace {

hwloc_topology_t Topo(void* p) { return static_cast<hwloc_topology_t>(p); }

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

}  // namespace

Result<const HostTopology*> HostTopology::Get() {
  static const Result<const HostTopology*> instance = []() -> Result<const HostTopology*> {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return InternalError("hwloc_topology_init failed");
    if (hwloc_topology_load(topo) != 0) {
      const int err = errno;
      hwloc_topology_destroy(topo);
      return InternalError(std::string("hwloc_topology_load failed: ") + std::strerror(err));
    }
    auto* t = new HostTopology();  // lives for the process (intentionally never freed)
    t->topology_ = topo;
    const int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->numa_nodes_ = nodes > 0 ? nodes : 1;
    t->cores_ = cores > 0 ? cores : 1;
    return t;
  }();
  return instance;
}

HostTopology::~HostTopology() {
  if (topology_ != nullptr) hwloc_topology_destroy(Topo(topology_));
}

int HostTopology::CurrentNumaNode() const {
  Bitmap cpus(hwloc_bitmap_alloc());
  Bitmap nodes(hwloc_bitmap_alloc());
  if (!cpus || !nodes) return 0;
  if (hwloc_get_last_cpu_location(Topo(topology_), cpus.get(), HWLOC_CPUBIND_THREAD) != 0) {
    return 0;
  }
  hwloc_cpuset_to_nodeset(Topo(topology_), cpus.get(), nodes.get());
  const int first = hwloc_bitmap_first(nodes.get());
  return first < 0 ? 0 : first;
}

Status HostTopology::BindMemory(void* ptr, size_t size_bytes, int node) const {
  Bitmap set(hwloc_bitmap_alloc());
  if (!set) return OutOfMemoryError("cpu: hwloc_bitmap_alloc");
  hwloc_bitmap_only(set.get(), static_cast<unsigned>(node));
  const int flags = HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_STRICT;
  if (hwloc_set_area_membind(Topo(topology_), ptr, size_bytes, set.get(), HWLOC_MEMBIND_BIND,
                             flags) != 0) {
    const int err = errno;
    return Status(
        StatusCode::kUnavailable,
        "hwloc_set_area_membind to NUMA node " + std::to_string(node) + ": " + std::strerror(err),
        err);
  }
  return Status::Ok();
}

std::string HostTopology::Describe() const {
  return std::to_string(numa_nodes_) + (numa_nodes_ == 1 ? " NUMA node, " : " NUMA nodes, ") +
         std::to_string(cores_) + (cores_ == 1 ? " core" : " cores");
}

}  // namespace strata
