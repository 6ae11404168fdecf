#include "tools/strata/train/cmd_train_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "models/llama/llama_footprint.h"

namespace strata::cli {

namespace {

ModelShape TrainShape(const llama::LlamaConfig& model, const Config& config, int64_t seq_len) {
  return llama::LlamaFootprint(model, config.batch.micro_batch_per_gpu, seq_len, false, "llama",
                               config.strata.lm_head_chunk);
}

}  // namespace

Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing) {
  PlanOptions po;
  po.world = world;
  po.rank = rank;
  po.activation_checkpointing = activation_checkpointing;
  return PlanEngineMemory(TrainShape(model, config, seq_len), config, po);
}

uint64_t ExportMappedBytes(uint64_t num_params, int world) {
  const uint64_t w = static_cast<uint64_t>(std::max(world, 1));
  return 12 * ((num_params + w - 1) / w);
}

Result<BudgetPlan> PlanTrainRunWithinBudget(const llama::LlamaConfig& model, const Config& config,
                                            int world, int rank, int64_t seq_len,
                                            uint64_t export_mapped_bytes) {
  const uint64_t budget = config.strata.sizes_within_budget ? 0 : config.strata.cpu_memory_bytes;
  // The export's mapped checkpoint comes out of the budget first.
  const uint64_t for_steps =
      budget == 0 ? 0 : (budget > export_mapped_bytes ? budget - export_mapped_bytes : 1);
  STRATA_ASSIGN_OR_RETURN(
      BudgetPlan b,
      SearchWithinCpuBudget(TrainShape(model, config, seq_len), config,
                            {.world = world, .rank = rank}, for_steps, config.zero.auto_sizes));
  if (export_mapped_bytes > 0) {
    // After the steps; added to them since the allocator may still hold the step's freed
    // buffers (Note [Pageable terms] in engine/plan/pageable_plan.cc).
    for (MemoryPlan* p : {&b.plan, &b.minimum}) {
      p->items.push_back(
          {"export from the checkpoint: its master + moments shard mapped and "
           "verified (file pages)",
           PlanTier::kPageableCpu, export_mapped_bytes});
      p->tier_bytes[static_cast<size_t>(PlanTier::kPageableCpu)] += export_mapped_bytes;
    }
    b.minimum_cpu_bytes += export_mapped_bytes;
  }
  if (!b.fits) {
    const Status s = CpuBudgetRefusal(b, budget);
    const std::string& m = s.message();
    const size_t nl = m.find('\n');
    if (nl == std::string::npos) return s;
    std::fprintf(stderr, "%s", m.substr(nl + 1).c_str());
    return Status(s.code(), m.substr(0, nl) + "; the per-tier table is above");
  }
  if (budget > 0) b.config.strata.sizes_within_budget = true;
  return b;
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
