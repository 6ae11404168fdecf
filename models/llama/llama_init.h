// The seeded initialisation `strata train --init PRESET` and the benchmarks give a Llama's
// parameters: normal(0, 0.02) seeded by (seed, parameter index), RMSNorm weights 1. It depends
// only on the parameter, never on where the engine places it, so every placement and rank starts
// from the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/status.h"
#include "nn/tensor/parameter.h"

namespace strata::llama {

// Fills `out` (the parameter's numel() elements) with its initial values. The signature is the
// engine's ParamInitFn (engine/engine.h).
std::function<Status(const nn::Parameter& p, std::span<float> out)> RandomInit(uint64_t seed);

}  // namespace strata::llama
