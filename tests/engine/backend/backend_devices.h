// The device kinds the backend suites run on: `host` (HostDevice: host-addressable memory, the
// CPU paths), `host_opaque` (HostDevice advertising memory the host cannot address, so the code
// written for a GPU — device optimizer kernels — runs here) and `cuda` (a real GPU; skips with
// "no CUDA device: ..." where there is none or the build has no CUDA).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata::testing {

enum class BackendKind { kHost, kHostOpaque, kCuda };

const char* BackendName(BackendKind kind);
std::vector<BackendKind> AllBackends();

// The device for `kind`, or Unavailable ("no CUDA device: ...") for cuda without a GPU.
Result<std::unique_ptr<Device>> MakeBackendDevice(BackendKind kind,
                                                  size_t memory_bytes = size_t{512} << 20);

}  // namespace strata::testing
