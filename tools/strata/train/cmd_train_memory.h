// Memory planning for the CLI: a Llama as the engine's memory planner sees it (parameter numels,
// the activation buffers LlamaForCausalLM allocates for a batch), and `strata train`'s per-tier
// memory table — planned at start, planned vs measured peak at the end, and the JSON fields.
//
// Measured peaks, per tier:
//   device        Device::MemoryStats().peak_bytes (the allocator's own peak);
//   pinned cpu    the run's TierBudget peak on the cpu tier (every PinnedPool the engine makes);
//   pageable cpu  peak RSS growth of the process since the baseline (VmHWM after resetting it
//                 through /proc/self/clear_refs), minus the device peak when the device is the
//                 host-emulated one (its arena is process memory) and minus the pinned peak:
//                 an approximation that also counts the BLAS and thread stacks;
//   nvme          the TierBudget's nvme tier peak (swap files), 0 when nothing is swapped.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/config.h"
#include "engine/plan/memory_plan.h"
#include "models/llama/llama_config.h"
#include "offload/device/device.h"
#include "offload/tier_budget.h"

namespace strata::cli {

// The Llama's shape for `micro_batch` sequences of `seq_len` tokens: parameter numels in
// Hugging Face order, the RoPE tables, and the activation buffers with and without activation
// checkpointing (LlamaForCausalLM::EnsureBuffers, allocated as the device arena rounds them).
// cpu_checkpointing moves the checkpointed layer inputs to pinned CPU memory.
ModelShape LlamaModelShape(const llama::LlamaConfig& config, int64_t micro_batch, int64_t seq_len,
                           bool cpu_checkpointing = false, std::string name = "llama");

// Process memory: resets the peak RSS (when the kernel lets us) and remembers the current RSS.
struct MemoryBaseline {
  uint64_t rss_bytes = 0;
  static MemoryBaseline Take();
};
// VmRSS / VmHWM of this process in bytes (0 if /proc is unreadable).
uint64_t CurrentRssBytes();
uint64_t PeakRssBytes();

// Measured per-tier peaks of a run (see the header comment for what each is).
TierBytes MeasuredPeaks(const Device& device, const TierBudget& budget,
                        const MemoryBaseline& baseline);

// Capacities the run has: the device's capacity, the budget's cpu limit (0 when unlimited).
TierBytes RunCapacities(const Device& device, const TierBudget& budget);

// The plan of a `strata train` run on this rank.
Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing = false);

// The fit check before the engine places anything: Ok, or OutOfMemory with one line ("... does
// not fit ...: tier device needs X, capacity Y; the per-tier table is above") after printing the
// per-tier table and the items it needed to stderr. Capacities are RunCapacities().
Status CheckTrainRunFits(const MemoryPlan& plan, const Device& device, const TierBudget& budget);

// "memory plan (ZeRO-2, ...), per rank:" + the table (planned and capacity).
std::string TrainMemoryStartText(const MemoryPlan& plan, const TierBytes& capacities);
// "memory (planned vs peak):" + the table with peaks.
std::string TrainMemoryEndText(const MemoryPlan& plan, const TierBytes& peaks);
// Sets j["planned_bytes"] and j["peak_bytes"] ({device, pinned_cpu, pageable_cpu, nvme}, and
// "cpu" = pinned_cpu as earlier versions printed it).
void AddMemoryJson(const MemoryPlan& plan, const TierBytes& peaks, nlohmann::json* j);

}  // namespace strata::cli
