// Pins a launched rank to its share of the machine's cores (hwloc), as `strata launch` does for
// each local rank before starting the program (the program's threads inherit it).
#pragma once

#include <string>

#include "core/status.h"

namespace strata {

// The cores this process may use, split into `local_world` contiguous groups; rank `local_rank`
// is bound to its group (with fewer cores than ranks, to core local_rank % cores). Returns what
// it did ("cores 2-3 of 4"). Unavailable if hwloc cannot read the topology or bind.
Result<std::string> BindToCoreShare(int local_rank, int local_world);

}  // namespace strata
