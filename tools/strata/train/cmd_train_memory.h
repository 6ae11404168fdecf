// Memory planning for the CLI: `strata train`'s plan of a Llama run (its footprint from
// models/llama/llama_footprint.h), and its per-tier memory table — planned at start, planned vs
// measured peak at the end, and the JSON fields.

#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/config.h"
#include "engine/plan/cpu_budget.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/run_memory.h"
#include "models/llama/config/llama_config.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"

namespace strata::cli {

// The plan of a `strata train` run on this rank.
Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing = false);

// What the run writes after its steps: a checkpoint (--save) and an export (--export, from the
// saved checkpoint when there is one, else from the engine's state).
struct TrainOutputs {
  bool save = false;
  bool export_weights = false;
};

// The same plan within strata.cpu_memory: the "auto" sizing keys chosen (engine/plan/cpu_budget.h)
// and the config flagged so the engine keeps them. Without a budget, PlanTrainRun's plan.
// OutOfMemory naming strata.cpu_memory and the minimum when the minimum pipeline does not fit:
// its per-tier table goes to stderr, the status keeps the first line. The save's and export's
// pageable items (engine/plan/pageable_plan.h, phases of their own) are added to the plans; the
// search reserves their bytes out of the budget first.
Result<BudgetPlan> PlanTrainRunWithinBudget(const llama::LlamaConfig& model, const Config& config,
                                            int world, int rank, int64_t seq_len,
                                            TrainOutputs outputs = {});

// "memory plan (ZeRO-2, ...), per rank:" + the table (planned and capacity).
std::string TrainMemoryStartText(const MemoryPlan& plan, const TierBytes& capacities);
// "memory (planned vs peak):" + the table with peaks.
std::string TrainMemoryEndText(const MemoryPlan& plan, const TierBytes& peaks);
// Sets j["planned_bytes"] and j["peak_bytes"] ({device, pinned_cpu, pageable_cpu, nvme}, and
// "cpu" = pinned_cpu as earlier versions printed it).
void AddMemoryJson(const MemoryPlan& plan, const TierBytes& peaks, nlohmann::json* j);

}  // namespace strata::cli
