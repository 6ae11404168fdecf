#include "offload/device/registry.h"

#include "offload/device/optim/optimizer_kernels.h"
#include "strata/config.h"

namespace strata {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "?";
}

bool DeviceKindBuilt(DeviceKind kind) {
  if (kind == DeviceKind::kHost) return true;
#if STRATA_WITH_CUDA
  return kind == DeviceKind::kCuda;
#else
  return false;
#endif
}

std::vector<DeviceKind> BuiltDeviceKinds() {
  std::vector<DeviceKind> kinds = {DeviceKind::kHost};
  if (DeviceKindBuilt(DeviceKind::kCuda)) kinds.push_back(DeviceKind::kCuda);
  return kinds;
}

Result<DeviceKind> ParseDeviceKind(std::string_view text) {
  if (text == "host") return DeviceKind::kHost;
  if (text == "cuda") return DeviceKind::kCuda;
  return InvalidArgumentError("unknown device kind '" + std::string(text) +
                              "' (allowed: host, cuda)");
}

const OptimizerKernelTable* OptimizerKernelsFor(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return &internal::HostOptimizerKernels();
    case DeviceKind::kCuda:
#if STRATA_WITH_CUDA
      return &internal::CudaOptimizerKernels();
#else
      return nullptr;  // built without CUDA
#endif
  }
  return nullptr;
}

Result<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options) {
  switch (options.kind) {
    case DeviceKind::kHost:
      return CreateHostDevice(options.host);
    case DeviceKind::kCuda:
#if STRATA_WITH_CUDA
      return CreateCudaDevice(options.cuda);
#else
      return UnavailableError("cuda device: this build of Strata was configured without CUDA");
#endif
  }
  return InvalidArgumentError("unknown device kind");
}

}  // namespace strata
