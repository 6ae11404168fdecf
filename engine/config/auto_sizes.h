// Sizing keys written "auto" (buffer sizes and counts, sub_group_size, live and prefetch limits,
// max_in_cpu, bucket sizes, persistence thresholds): the planner chooses, and says what it chose.
// Reading the config gives each a documented value (Hugging Face's hidden-size rule where it has
// one, else DeepSpeed's default: deepspeed/zero_config.cc); the ones that depend on the model are
// settled here once its parameters are known (strata train and Engine::Initialize call it), and
// AutoSizesText lists every choice with its reason for start-up output.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "engine/config/config.h"

namespace strata {

// offload_param.buffer_size "auto": DeepSpeed's default 1e8, raised to the largest parameter
// shard at `world` ranks (ceil(numel / world) at stage 3) when one is larger, since one buffer
// holds a whole shard. Updates the report's origin. Idempotent; keys not "auto" are untouched.
void ResolveModelAutoSizes(Config* config, std::span<const size_t> numels, int world);

// One line per "auto" sizing key, "  <path> = <value>  (<why>)", or "" when there is none.
std::string AutoSizesText(const Config& config);

}  // namespace strata
