// HostTopology: the machine's NUMA layout (via hwloc), used to place pinned buffers on the node
// of the thread that creates them, so host<->device copies and CPU Adam read local memory.
//
// One process-wide instance, loaded on first use. Thread-safe after loading (hwloc topology
// queries are read-only; memory binding is per address range).
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace strata {

class HostTopology {
 public:
  // The process-wide topology; Internal error if hwloc cannot load it.
  static Result<const HostTopology*> Get();

  int numa_node_count() const { return numa_nodes_; }
  int core_count() const { return cores_; }
  // OS index of the NUMA node of the CPU the calling thread last ran on (0 if unknown).
  int CurrentNumaNode() const;
  // Binds the pages of [ptr, ptr + size_bytes) to NUMA node `node` (hwloc_set_area_membind,
  // strict bind + migrate). Call before first touch. Unavailable if the OS refuses (e.g. a
  // kernel without NUMA support); the memory is still usable, just not bound.
  Status BindMemory(void* ptr, size_t size_bytes, int node) const;
  // "1 NUMA node, 2 cores".
  std::string Describe() const;

  ~HostTopology();
  HostTopology(const HostTopology&) = delete;
  HostTopology& operator=(const HostTopology&) = delete;

 private:
  HostTopology() = default;
  void* topology_ = nullptr;  // hwloc_topology_t, kept out of this header
  int numa_nodes_ = 1;
  int cores_ = 1;
};

}  // namespace strata
