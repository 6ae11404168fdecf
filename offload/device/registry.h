// Device registry: creates a Device by kind and says which kinds this build and machine have.
//
// The one place that knows whether CUDA was compiled in (STRATA_WITH_CUDA); everything above it
// is written against Device and asks here for an instance.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "offload/device/api/device.h"
#include "offload/device/cuda/cuda_device.h"
#include "offload/device/host/host_device.h"

namespace strata {

struct DeviceOptions {
  DeviceKind kind = DeviceKind::kHost;
  HostDeviceOptions host;
  CudaDeviceOptions cuda;
};

// True if the backend for `kind` is compiled into this build (the host one always is).
bool DeviceKindBuilt(DeviceKind kind);

// The device kinds compiled in, host first.
std::vector<DeviceKind> BuiltDeviceKinds();

// Parses "host" or "cuda" (case-sensitive); InvalidArgument naming the allowed values otherwise.
Result<DeviceKind> ParseDeviceKind(std::string_view text);

// Unavailable if the backend is not built ("... built without CUDA") or no device is present.
Result<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options);

}  // namespace strata
