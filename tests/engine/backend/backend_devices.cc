#include "tests/engine/backend/backend_devices.h"

#include "offload/device/registry.h"

namespace strata::testing {

const char* BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kHost:
      return "host";
    case BackendKind::kHostOpaque:
      return "host_opaque";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "?";
}

std::vector<BackendKind> AllBackends() {
  return {BackendKind::kHost, BackendKind::kHostOpaque, BackendKind::kCuda};
}

Result<std::unique_ptr<Device>> MakeBackendDevice(BackendKind kind, size_t memory_bytes) {
  DeviceOptions o;
  o.host.memory_bytes = memory_bytes;
  o.host.populate_memory = false;
  switch (kind) {
    case BackendKind::kHost:
      break;
    case BackendKind::kHostOpaque:
      o.host.opaque_memory = true;
      break;
    case BackendKind::kCuda: {
      o.kind = DeviceKind::kCuda;
      Result<std::unique_ptr<Device>> d = CreateDevice(o);
      if (!d.ok() && d.status().code() == StatusCode::kUnavailable) {
        const std::string msg = d.status().message();
        return UnavailableError(msg.starts_with("no CUDA device") ? msg : "no CUDA device: " + msg);
      }
      return d;
    }
  }
  return CreateDevice(o);
}

}  // namespace strata::testing
