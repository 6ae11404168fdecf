// MemoryPlan: the bytes one rank of the engine will hold on each tier — device, pinned CPU,
// pageable CPU, NVMe — for a model shape and a resolved config, itemised buffer by buffer, plus
// the bytes a training step moves over each link. It is what Engine::Initialize checks a capped
// device against, what `strata train` prints next to the measured peaks, and what
// `strata estimate` tabulates over stages 0-3 x offload none/cpu/nvme.
//
// The plan follows the engine's real allocations (engine.cc's Place: flat parameter and gradient
// buffers, the updated-shard buffer, the optimizer slab, staging, reduce buffers), rounded as the
// allocators round them (device arena: 256 B; PinnedPool: 4 KiB, or 2 MiB past 2 MiB), stage 3
// included (zero3_hooks.cc); NVMe placement is planned from the engine design (swap buffers and
// the swap files) — Note [Stage 3 and NVMe plans] in memory_plan.cc.
//
// Model-agnostic: the model is a ModelShape (nn/modules/lm/footprint.h: parameter numels, what its
// activations need), which each model family reports (models/llama/llama_footprint.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/config/config.h"
#include "nn/modules/lm/footprint.h"

namespace strata {

// The four places memory is planned in. Pinned CPU is what the engine charges to its
// TierBudget's cpu tier (PinnedPools: optimizer state, staging, swap buffers).
enum class PlanTier : uint8_t { kDevice = 0, kPinnedCpu = 1, kPageableCpu = 2, kNvme = 3 };
inline constexpr int kNumPlanTiers = 4;
inline constexpr std::array<PlanTier, kNumPlanTiers> kAllPlanTiers = {
    PlanTier::kDevice, PlanTier::kPinnedCpu, PlanTier::kPageableCpu, PlanTier::kNvme};

// "device", "pinned cpu", "pageable cpu", "nvme".
std::string_view PlanTierName(PlanTier tier);
// "device", "pinned_cpu", "pageable_cpu", "nvme" (JSON keys).
std::string_view PlanTierKey(PlanTier tier);

// Bytes per tier, indexed by PlanTier.
using TierBytes = std::array<uint64_t, kNumPlanTiers>;

struct PlanOptions {
  int world = 1;  // data-parallel ranks
  int rank = 0;   // whose partition (ranks differ only by padding)
  // Which activation figure to use (the model's own option; the DeepSpeed JSON has none).
  bool activation_checkpointing = false;
  // false: plan only what Engine::Initialize places (the fit check, before any batch exists).
  bool include_activations = true;
};

// When an item is held: for the whole run, or only during one phase of it. The phases follow
// one another (Initialize, the steps, a checkpoint save, an export) and what one phase allocates
// is freed before the next begins, so a tier holds its whole-run items plus its largest phase's
// items, not their sum (Note [Pageable terms] in engine/plan/pageable_plan.cc).
enum class PlanPhase : uint8_t { kRun = 0, kInitialize = 1, kSteps = 2, kSave = 3, kExport = 4 };
inline constexpr int kNumPlanPhases = 5;
// "run", "initialize", "steps", "save", "export".
std::string_view PlanPhaseName(PlanPhase phase);

struct PlanItem {
  std::string what;  // "fp32 master + moments + gradients", ...
  PlanTier tier = PlanTier::kDevice;
  uint64_t bytes = 0;
  PlanPhase phase = PlanPhase::kRun;
};

// Bytes a training step (one optimizer step: gradient_accumulation_steps micro-batches) moves,
// per rank.
struct StepTraffic {
  uint64_t host_to_device_bytes = 0;
  uint64_t device_to_host_bytes = 0;
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_write_bytes = 0;
  uint64_t collective_bytes = 0;  // sent by this rank (ring algorithms)
  // Seconds at nominal link speeds (PCIe 25 GB/s, NVMe 3 GB/s read / 2.5 GB/s write, network
  // 12.5 GB/s across nodes, 100 GB/s within a node): a ranking, not a prediction.
  double NominalSeconds(int nodes) const;
};

struct MemoryPlan {
  std::string placement;  // "ZeRO-2, offload_optimizer cpu, offload_param none, bf16"
  int world = 1;
  std::vector<PlanItem> items;
  TierBytes tier_bytes{};  // sums of items per tier
  StepTraffic traffic;
  std::vector<std::string> notes;  // what the plan assumed ("stage 3: planned from the design")

  uint64_t bytes(PlanTier t) const { return tier_bytes[static_cast<size_t>(t)]; }
};

// Appends `item` (nothing when its bytes are 0) and updates plan->tier_bytes: per tier, the
// whole-run items plus the largest phase's items.
void AddPlanItem(MemoryPlan* plan, PlanItem item);

// Plans `config` (zero stage, offloads, dtypes, buckets, sub-groups, batch) for `model`.
// InvalidArgument for options it cannot plan (world < 1, rank outside the world, no parameters,
// nvme without nvme_path is fine: the plan needs no path).
Result<MemoryPlan> PlanEngineMemory(const ModelShape& model, const Config& config,
                                    const PlanOptions& options);

// A ModelShape from bare parameter numels (what Engine::Initialize knows before any batch).
ModelShape ShapeFromNumels(std::vector<uint64_t> numels, std::string name = "model");

// A fixed-width table, one row per tier:
//   tier           planned     peak        capacity
//   device         412.3 MiB   405.1 MiB   1 GiB
// `peaks` and `capacities` add their columns when given (a capacity of 0 prints "-"); a planned
// figure above its capacity is marked "does not fit".
std::string FormatTierTable(const MemoryPlan& plan, const std::optional<TierBytes>& peaks = {},
                            const std::optional<TierBytes>& capacities = {});
// The items, largest first, one line each ("device  256 MiB  fp32 gradients"; an item held
// during one phase only says which: "pageable cpu  64 MiB  [save] ..."), then the notes.
std::string FormatPlanItems(const MemoryPlan& plan);

// The first tier whose planned bytes pass its capacity (capacity 0 = not limited), if any.
std::optional<PlanTier> FirstTierThatDoesNotFit(const MemoryPlan& plan,
                                                const TierBytes& capacities);

// Ok if every tier fits; else OutOfMemory "engine memory plan does not fit: device needs X of
// Y" followed by the per-tier table and the items (what it needed). For Engine::Initialize:
// capacities = {device MemoryStats().capacity_bytes, cpu TierBudget limit (0 if unlimited),
// 0, 0}.
Status CheckPlanFits(const MemoryPlan& plan, const TierBytes& capacities);

}  // namespace strata
