// Planning within a CPU budget (strata.cpu_memory, engine/config/strata/cpu_memory.h): the sizing
// keys the planner owns — with NVMe placements the optimizer's swap buffers (buffer_count, the
// sub-group they hold), the parameter swap buffers (buffer_count, buffer_size) and max_in_cpu —
// are chosen, each as large as the budget allows, so that the plan's CPU memory (pinned +
// pageable) stays within it. Engine::Initialize and `strata train` choose the keys written
// "auto"; `strata estimate` chooses all of them for the configs it suggests. When even the
// smallest settings (the minimum pipeline) do not fit, the answer is OutOfMemory naming
// strata.cpu_memory and that minimum, with the per-tier table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/config/config.h"
#include "engine/plan/memory_plan.h"

namespace strata {

// Pinned + pageable CPU bytes of a plan.
uint64_t PlannedCpuBytes(const MemoryPlan& plan);

// Every sizing key the planner may choose under a budget (canonical paths), in the order it
// grows them: the optimizer's swap buffers, the parameter swap buffers, the sub-group, the
// parameter buffer size, max_in_cpu.
const std::vector<std::string>& BudgetSizingKeys();

struct BudgetPlan {
  Config config;                    // the input with the free keys chosen (origins say why)
  MemoryPlan plan;                  // its plan
  bool fits = true;                 // PlannedCpuBytes(plan) <= the budget (always, without one)
  MemoryPlan minimum;               // the plan with every free key at its smallest
  uint64_t minimum_cpu_bytes = 0;   // PlannedCpuBytes(minimum)
  std::vector<std::string> free;    // the keys that were free (applied to the placement)
  std::vector<std::string> chosen;  // "zero_optimization.sub_group_size = 20000000", per key
};

// Chooses the keys of `free_keys` (paths of BudgetSizingKeys(); others are ignored) that apply
// to the placement, each the largest of its candidates that keeps PlannedCpuBytes within
// `cpu_bytes`, growing them in BudgetSizingKeys() order from the minimum. `cpu_bytes` 0: no
// budget, the config is planned as it is. When even the minimum does not fit, `fits` is false
// and the config and plan are the minimum's. Errors only as PlanEngineMemory's.
Result<BudgetPlan> SearchWithinCpuBudget(const ModelShape& model, const Config& config,
                                         const PlanOptions& options, uint64_t cpu_bytes,
                                         const std::vector<std::string>& free_keys);

// OutOfMemory for a search that did not fit:
//   "strata.cpu_memory = 1 MiB (1048576 bytes) is below the minimum this placement (...) needs:
//    1.2 GiB (1288490188 bytes) = pinned ... + pageable ... with <keys> at their smallest; set
//    strata.cpu_memory to at least 1288490188" then the per-tier table and the items.
Status CpuBudgetRefusal(const BudgetPlan& search, uint64_t cpu_bytes);

// SearchWithinCpuBudget, then CpuBudgetRefusal when the minimum does not fit.
Result<BudgetPlan> PlanWithinCpuBudget(const ModelShape& model, const Config& config,
                                       const PlanOptions& options, uint64_t cpu_bytes,
                                       const std::vector<std::string>& free_keys);

}  // namespace strata
