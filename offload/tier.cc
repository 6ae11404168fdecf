#include "offload/tier.h"

#include <string>

namespace strata {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kCpu:
      return "cpu";
    case Tier::kNvme:
      return "nvme";
  }
  return "?";
}

Result<Tier> ParseTier(std::string_view name) {
  for (Tier t : kAllTiers) {
    if (name == TierName(t)) return t;
  }
  return InvalidArgumentError("unknown tier '" + std::string(name) +
                              "' (allowed: device, cpu, nvme)");
}

}  // namespace strata
