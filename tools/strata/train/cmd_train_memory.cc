#include "tools/strata/train/cmd_train_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/units.h"
#include "engine/base/partition.h"
#include "engine/nvme/swap_chunks.h"
#include "engine/plan/pageable_plan.h"
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

namespace {

// The save's and export's items for `config` (its swap chunks) on `model`.
SaveExportInputs SaveExportOf(const llama::LlamaConfig& model, const Config& config,
                              const ModelShape& shape, int world, int rank, TrainOutputs outputs) {
  SaveExportInputs in;
  in.num_params = shape.NumParameters();
  in.largest_param = shape.LargestParameter();
  in.export_bytes = DTypeBytes(model.torch_dtype);
  in.save = outputs.save;
  in.export_from_checkpoint = outputs.save && outputs.export_weights;
  in.export_from_engine = !outputs.save && outputs.export_weights;
  const int part_world = config.zero.stage >= 1 ? world : 1;
  std::vector<size_t> numels(shape.param_numels.begin(), shape.param_numels.end());
  Result<PartitionLayout> layout = PartitionLayout::Create(
      numels, part_world, config.zero.stage >= 1 ? rank : 0, /*align_numel=*/64);  // engine.cc's
  if (layout.ok()) {
    in.partition_numel = layout->partition_numel();
    for (const SubGroup& g : OptimizerSubGroups(*layout, config)) {
      in.largest_chunk = std::max<uint64_t>(in.largest_chunk, g.flat_end - g.flat_begin);
    }
  }
  return in;
}

}  // namespace

Result<BudgetPlan> PlanTrainRunWithinBudget(const llama::LlamaConfig& model, const Config& config,
                                            int world, int rank, int64_t seq_len,
                                            TrainOutputs outputs) {
  const uint64_t budget = config.strata.sizes_within_budget ? 0 : config.strata.cpu_memory_bytes;
  const ModelShape shape = TrainShape(model, config, seq_len);
  // The save's and export's bytes come out of the budget first (at the config as written: the
  // swap chunk is not a key the search chooses).
  MemoryPlan after;
  AddSaveExportItems(config, SaveExportOf(model, config, shape, world, rank, outputs), &after);
  const uint64_t after_bytes = after.bytes(PlanTier::kPageableCpu);
  const uint64_t for_steps = budget == 0 ? 0 : (budget > after_bytes ? budget - after_bytes : 1);
  STRATA_ASSIGN_OR_RETURN(
      BudgetPlan b, SearchWithinCpuBudget(shape, config, {.world = world, .rank = rank}, for_steps,
                                          config.zero.auto_sizes));
  // Held after the steps, in phases of their own (Note [Pageable terms] in
  // engine/plan/pageable_plan.cc).
  const SaveExportInputs in = SaveExportOf(model, b.config, shape, world, rank, outputs);
  AddSaveExportItems(b.config, in, &b.plan);
  AddSaveExportItems(b.config, in, &b.minimum);
  // The budget that lets the search find the minimum: the reservation above included.
  b.minimum_cpu_bytes += after_bytes;
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
