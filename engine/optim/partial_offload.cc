#include "engine/optim/partial_offload.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

namespace strata {

namespace {
std::string Text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

Status CheckPartialOffload(const ZeroConfig& z) {
  const double ratio = z.offload_optimizer.ratio;
  if (!(ratio > 0.0 && ratio <= 1.0)) {  // also NaN
    return InvalidArgumentError("zero_optimization.offload_optimizer.ratio = " + Text(ratio) +
                                " is out of range: must be in (0, 1] (the fraction of the "
                                "optimizer state stepped on the CPU; 1 = all of it)");
  }
  if (ratio < 1.0 && z.offload_optimizer.device == OffloadDevice::kNvme) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio = " + Text(ratio) +
        " (partial offload) cannot be used with zero_optimization.offload_optimizer.device = "
        "\"nvme\" (the whole optimizer state is swapped): use device \"cpu\" or ratio 1");
  }
  return Status::Ok();
}

size_t PartialOffloadDeviceGroups(size_t groups, double ratio) {
  const double on_device = std::floor((1.0 - ratio) * static_cast<double>(groups));
  if (!(on_device > 0)) return 0;
  return std::min(groups, static_cast<size_t>(on_device));
}

size_t PartialOffloadSplit(const ZeroConfig& z, std::span<const SubGroup> groups) {
  if (z.offload_optimizer.device != OffloadDevice::kCpu || !(z.offload_optimizer.ratio < 1.0)) {
    return 0;
  }
  const size_t k = PartialOffloadDeviceGroups(groups.size(), z.offload_optimizer.ratio);
  return k == 0 ? 0 : groups[k - 1].flat_end;
}

}  // namespace strata
