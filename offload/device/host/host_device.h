// HostDevice: a GPU emulated on the host, always built, so every engine path runs without one.
//
// Device memory is a capped arena in host RAM (a real OutOfMemory when full), streams are worker
// threads with CUDA's ordering rules, events behave like CUDA events, and host<->device copies
// can be paced to a link bandwidth (e.g. 25 GB/s for PCIe Gen4 x16) so that copy/compute overlap
// behaves as on a PCIe GPU. Unthrottled copies are plain memmoves on the stream's own worker.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata {

struct HostDeviceOptions {
  // Emulated device memory (the arena's cap).
  size_t memory_bytes = size_t{1} << 30;
  // Per-direction link bandwidth for H2D and D2H copies in GB/s (1e9 B/s); 0 = unthrottled.
  // The two directions are independent (full duplex); streams copying in the same direction
  // share it.
  double link_bandwidth_gbps = 0;
  // Bandwidth for D2D copies in GB/s; 0 = unthrottled.
  double device_bandwidth_gbps = 0;
  // Touch the arena's pages at creation (first touch of fresh memory is slow on these machines).
  bool populate_memory = true;
  // mlock the arena (falls back to pageable with one line if the lock limit refuses).
  bool lock_memory = false;
  // Ops a stream can hold before an enqueue blocks.
  size_t queue_depth = 1024;
  // Advertise the memory as not host-addressable (caps().host_accessible_memory = false), so the
  // code paths written for a real GPU (device kernels instead of host loops on device memory) run
  // on this emulation and are tested here. The memory is still host RAM.
  bool opaque_memory = false;
};

// InvalidArgument for a zero size or negative bandwidth; OutOfMemory (cpu) if the arena cannot be
// mapped.
Result<std::unique_ptr<Device>> CreateHostDevice(const HostDeviceOptions& options);

}  // namespace strata
