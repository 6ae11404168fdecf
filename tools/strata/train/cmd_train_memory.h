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
#include "models/llama/llama_config.h"
#include "offload/device/device.h"
#include "offload/tier_budget.h"

namespace strata::cli {

// The plan of a `strata train` run on this rank.
Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing = false);

// The same plan within strata.cpu_memory: the "auto" sizing keys chosen (engine/plan/cpu_budget.h)
// and the config flagged so the engine keeps them. Without a budget, PlanTrainRun's plan.
// OutOfMemory naming strata.cpu_memory and the minimum when the minimum pipeline does not fit:
// its per-tier table goes to stderr, the status keeps the first line.
// `export_mapped_bytes`: when the run exports from the checkpoint it saved (--save and --export),
// the bytes of the checkpoint shard the export maps and verifies (ExportMappedBytes), planned as
// a pageable item of its own.
Result<BudgetPlan> PlanTrainRunWithinBudget(const llama::LlamaConfig& model, const Config& config,
                                            int world, int rank, int64_t seq_len,
                                            uint64_t export_mapped_bytes = 0);

// The rank's checkpoint shard of fp32 master + moments (12 B per partition element), which the
// export from a checkpoint maps whole and verifies.
uint64_t ExportMappedBytes(uint64_t num_params, int world);

// "memory plan (ZeRO-2, ...), per rank:" + the table (planned and capacity).
std::string TrainMemoryStartText(const MemoryPlan& plan, const TierBytes& capacities);
// "memory (planned vs peak):" + the table with peaks.
std::string TrainMemoryEndText(const MemoryPlan& plan, const TierBytes& peaks);
// Sets j["planned_bytes"] and j["peak_bytes"] ({device, pinned_cpu, pageable_cpu, nvme}, and
// "cpu" = pinned_cpu as earlier versions printed it).
void AddMemoryJson(const MemoryPlan& plan, const TierBytes& peaks, nlohmann::json* j);

}  // namespace strata::cli
