// Partial optimizer offload (zero_optimization.offload_optimizer.ratio < 1, DeepSpeed's
// "ratio"): which sub-groups of a rank's partition step on the device and which on the CPU.
//
// DeepSpeed (stage3.py) steps sub-group i of n on the CPU if i >= int((1 - ratio) * n), else on
// the accelerator: the LAST sub-groups go to the CPU, the first stay on the device. Strata takes
// the same rule at stages 1-3 with offload_optimizer.device = cpu; the split is a sub-group
// boundary, so no sub-group straddles the two tiers (engine/optim/optimizer_state.h).
#pragma once

#include <cstddef>
#include <span>

#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/config/deepspeed/zero_config.h"

namespace strata {

// Ok for ratio in (0, 1]; with ratio < 1, device must not be nvme. InvalidArgument naming the
// key(s) and what is allowed otherwise.
Status CheckPartialOffload(const ZeroConfig& z);

// How many of `groups` sub-groups stay on the device: int((1 - ratio) * groups), DeepSpeed's
// formula in double (so ratio 0.9 of 10 groups keeps 0 on the device, as DeepSpeed does).
size_t PartialOffloadDeviceGroups(size_t groups, double ratio);

// The flat index where the CPU part starts: the end of the last device sub-group (0 when every
// sub-group is on the CPU). 0 unless offload_optimizer.device is cpu and ratio < 1.
size_t PartialOffloadSplit(const ZeroConfig& z, std::span<const SubGroup> groups);

}  // namespace strata
