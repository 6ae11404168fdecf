#include "tools/strata/train/cmd_train_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "models/llama/llama_footprint.h"

namespace strata::cli {

Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing) {
  const ModelShape shape = llama::LlamaFootprint(model, config.batch.micro_batch_per_gpu, seq_len,
                                                 false, "llama", config.strata.lm_head_chunk);
  PlanOptions po;
  po.world = world;
  po.rank = rank;
  po.activation_checkpointing = activation_checkpointing;
  return PlanEngineMemory(shape, config, po);
}

std::string TrainMemoryStartText(const MemoryPlan& plan, const TierBytes& capacities) {
  return "memory plan (" + plan.placement + "), per rank:\n" +
         FormatTierTable(plan, std::nullopt, capacities);
}

std::string TrainMemoryEndText(const MemoryPlan& plan, const TierBytes& peaks) {
  return "memory (planned vs peak; pageable cpu = RSS growth minus device and pinned):\n" +
         FormatTierTable(plan, peaks, std::nullopt);
}

void AddMemoryJson(const MemoryPlan& plan, const TierBytes& peaks, nlohmann::json* j) {
  nlohmann::json planned = nlohmann::json::object(), peak = nlohmann::json::object();
  for (PlanTier t : kAllPlanTiers) {
    const std::string key(PlanTierKey(t));
    planned[key] = plan.bytes(t);
    peak[key] = peaks[static_cast<size_t>(t)];
  }
  peak["cpu"] = peaks[static_cast<size_t>(PlanTier::kPinnedCpu)];
  (*j)["planned_bytes"] = planned;
  (*j)["peak_bytes"] = peak;
}

}  // namespace strata::cli
