// SwapperOptions: what ParamSwapper and OptimizerSwapper share - where their swap files go and
// how they are kept (the `nvme_path`, `pin_memory` keys of offload_param / offload_optimizer,
// and Strata's own swap keys). Both swappers' options derive from it, so the fields are written
// once and read as `options.nvme_paths` on either. `buffer_count` stays with each swapper: it
// counts different things (elements x buffer_size vs largest sub-group) with different defaults.
#pragma once

#include <string>
#include <vector>

#include "offload/tier_budget.h"
#include "swap/swap_space.h"

namespace strata {

class Device;

struct SwapperOptions {
  std::vector<std::string> nvme_paths;  // one, or several to stripe over
  bool pin_memory = true;
  // xxHash per block, verified on every read (strata.swap_checksums; on unless turned off).
  bool checksums = true;
  int rank = 0;
  // Optional: the swap buffers are charged to Tier::kCpu and the swap file to Tier::kNvme; the
  // buffers are registered with `device` for DMA when it can (else mlocked). Both must outlive
  // the swapper.
  TierBudget* budget = nullptr;
  Device* device = nullptr;
};

// The SwapSpace options for a swapper's files ("param", "optimizer").
inline SwapSpaceOptions SwapSpaceOptionsFor(const SwapperOptions& o, std::string name) {
  SwapSpaceOptions so;
  so.dirs = o.nvme_paths;
  so.name = std::move(name);
  so.rank = o.rank;
  so.checksums = o.checksums;
  so.budget = o.budget;
  return so;
}

}  // namespace strata
