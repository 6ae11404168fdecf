// Tier: where a tensor's bytes live — device memory, (pinned) CPU memory or NVMe.
//
// The names match DeepSpeed's offload `device` values ("cpu", "nvme"); "device" is the
// accelerator (DeepSpeed's "none": nothing offloaded).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace strata {

enum class Tier : uint8_t { kDevice = 0, kCpu = 1, kNvme = 2 };

inline constexpr int kNumTiers = 3;
inline constexpr std::array<Tier, kNumTiers> kAllTiers = {Tier::kDevice, Tier::kCpu, Tier::kNvme};

// "device", "cpu", "nvme".
std::string_view TierName(Tier tier);

// Inverse of TierName; InvalidArgument naming the allowed values otherwise.
Result<Tier> ParseTier(std::string_view name);

}  // namespace strata
