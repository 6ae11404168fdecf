// zero_step's bookkeeping: per-round samples of each variant, turned into medians, ratios
// against the bare loop, the per-part breakdown and the same-parameters check (one JSON object
// that --json prints and the table is drawn from).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/zero_step/variants.h"

namespace strata::bench {

struct VariantSamples {
  std::string name;
  std::vector<StepTimes> rounds;  // each the sum over the round's --steps steps
  float last_loss = 0;
};

// sum += t (adam_s stays -1 when t has none).
void Accumulate(const StepTimes& t, StepTimes* sum);

struct RunInfo {
  std::string preset, dtype, stage3_variant, stage3_refused;
  int64_t params = 0, batch = 0, seq = 0, rounds = 0, steps = 0, threads = 0;
  double link_gbps = 0;
};

// samples[0] is the bare loop (the reference), [1] the stage-0 engine, [2] the stage-3 one (or
// its stand-in); finals[v] are their fp32 master weights at the end.
nlohmann::json BuildReport(const RunInfo& info, const std::vector<VariantSamples>& samples,
                           const std::vector<std::vector<std::vector<float>>>& finals);

// The human-readable table of BuildReport's object, on stdout.
void PrintReport(const nlohmann::json& report);

}  // namespace strata::bench
