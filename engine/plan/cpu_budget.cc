#include "engine/plan/cpu_budget.h"

#include <algorithm>
#include <functional>

#include "core/units.h"

namespace strata {
namespace {

// One sizing key: where it lives in the config, whether it matters to the placement, and its
// candidate values, largest (DeepSpeed's default or more) first, smallest last.
struct Knob {
  std::string path;
  std::function<int64_t*(Config*)> ref;
  std::function<bool(const Config&)> applies;
  std::function<std::vector<int64_t>(const Config&, uint64_t largest_shard)> candidates;
};

bool OptNvme(const Config& c) { return c.zero.offload_optimizer.device == OffloadDevice::kNvme; }
bool ParamNvme(const Config& c) {
  return c.zero.stage == 3 && c.zero.offload_param.device == OffloadDevice::kNvme;
}

const std::vector<Knob>& Knobs() {
  static const std::vector<Knob> knobs = {
      {"zero_optimization.offload_optimizer.buffer_count",
       [](Config* c) { return &c->zero.offload_optimizer.buffer_count; }, OptNvme,
       [](const Config&, uint64_t) {
         return std::vector<int64_t>{4, 3, 2, 1};
       }},
      {"zero_optimization.offload_param.buffer_count",
       [](Config* c) { return &c->zero.offload_param.buffer_count; }, ParamNvme,
       [](const Config&, uint64_t) {
         return std::vector<int64_t>{5, 4, 3, 2, 1};
       }},
      // DeepSpeed's default 1e9 down to one parameter per sub-group (0); a sub-group never
      // splits a parameter, so the smallest swap buffer holds the largest shard.
      {"zero_optimization.sub_group_size", [](Config* c) { return &c->zero.sub_group_size; },
       OptNvme,
       [](const Config&, uint64_t) {
         return std::vector<int64_t>{1000000000, 500000000, 200000000, 100000000,
                                     50000000,   20000000,  10000000,  5000000,
                                     2000000,    1000000,   0};
       }},
      // A buffer holds a whole shard: DeepSpeed's default 1e8 or the largest shard.
      {"zero_optimization.offload_param.buffer_size",
       [](Config* c) { return &c->zero.offload_param.buffer_size; }, ParamNvme,
       [](const Config&, uint64_t largest) {
         const int64_t shard = static_cast<int64_t>(std::max<uint64_t>(largest, 1));
         std::vector<int64_t> v = {std::max<int64_t>(100000000, shard)};
         if (v[0] != shard) v.push_back(shard);
         return v;
       }},
      {"zero_optimization.offload_param.max_in_cpu",
       [](Config* c) { return &c->zero.offload_param.max_in_cpu; }, ParamNvme,
       [](const Config&, uint64_t) {
         return std::vector<int64_t>{1000000000, 100000000, 10000000, 0};
       }},
  };
  return knobs;
}

std::string Both(uint64_t bytes) {
  return FormatBytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

uint64_t PlannedCpuBytes(const MemoryPlan& plan) {
  return plan.bytes(PlanTier::kPinnedCpu) + plan.bytes(PlanTier::kPageableCpu);
}

const std::vector<std::string>& BudgetSizingKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const Knob& n : Knobs()) k.push_back(n.path);
    return k;
  }();
  return keys;
}

Result<BudgetPlan> SearchWithinCpuBudget(const ModelShape& model, const Config& config,
                                         const PlanOptions& options, uint64_t cpu_bytes,
                                         const std::vector<std::string>& free_keys) {
  BudgetPlan out;
  out.config = config;
  if (cpu_bytes == 0) {
    STRATA_ASSIGN_OR_RETURN(out.plan, PlanEngineMemory(model, config, options));
    out.minimum = out.plan;
    out.minimum_cpu_bytes = PlannedCpuBytes(out.plan);
    return out;
  }
  const uint64_t w = config.zero.stage == 3 ? static_cast<uint64_t>(std::max(options.world, 1)) : 1;
  const uint64_t largest_shard = (model.LargestParameter() + w - 1) / w;
  std::vector<const Knob*> free;
  for (const Knob& k : Knobs()) {
    if (k.applies(config) &&
        std::find(free_keys.begin(), free_keys.end(), k.path) != free_keys.end()) {
      free.push_back(&k);
      out.free.push_back(k.path);
    }
  }
  Config c = config;
  for (const Knob* k : free) *k->ref(&c) = k->candidates(c, largest_shard).back();
  STRATA_ASSIGN_OR_RETURN(out.minimum, PlanEngineMemory(model, c, options));
  out.minimum_cpu_bytes = PlannedCpuBytes(out.minimum);
  MemoryPlan plan = out.minimum;
  out.fits = out.minimum_cpu_bytes <= cpu_bytes;
  for (const Knob* k : free) {
    const std::vector<int64_t> cands = k->candidates(c, largest_shard);
    for (int64_t v : cands) {
      if (!out.fits || v == *k->ref(&c)) break;  // the smallest: already in
      Config t = c;
      *k->ref(&t) = v;
      STRATA_ASSIGN_OR_RETURN(MemoryPlan p, PlanEngineMemory(model, t, options));
      if (PlannedCpuBytes(p) <= cpu_bytes) {
        c = std::move(t);
        plan = std::move(p);
        break;
      }
    }
    const int64_t chosen = *k->ref(&c);
    out.chosen.push_back(k->path + " = " + std::to_string(chosen));
    c.report.origins[k->path] = {
        OriginKind::kAuto,
        (out.fits
             ? "chosen within strata.cpu_memory " + FormatBytes(cpu_bytes) + ": the largest of "
             : "the smallest of ") +
            std::to_string(cands.front()) + " .. " + std::to_string(cands.back()) +
            (out.fits ? " whose plan fits (CPU " + FormatBytes(PlannedCpuBytes(plan)) + ")"
                      : " (strata.cpu_memory " + FormatBytes(cpu_bytes) + " holds no more)")};
  }
  out.config = std::move(c);
  out.plan = std::move(plan);
  return out;
}

Status CpuBudgetRefusal(const BudgetPlan& b, uint64_t cpu_bytes) {
  std::string keys;
  for (const std::string& k : b.free) keys += (keys.empty() ? "" : ", ") + k;
  TierBytes caps{};
  caps[static_cast<size_t>(PlanTier::kPinnedCpu)] = cpu_bytes;
  return OutOfMemoryError(
      "strata.cpu_memory = " + Both(cpu_bytes) + " is below the minimum this placement (" +
      b.minimum.placement + ") needs: " + Both(b.minimum_cpu_bytes) + " = pinned " +
      FormatBytes(b.minimum.bytes(PlanTier::kPinnedCpu)) + " + pageable " +
      FormatBytes(b.minimum.bytes(PlanTier::kPageableCpu)) +
      (b.free.empty() ? std::string(" (no sizing key is \"auto\": the sizes are as written)")
                      : " with " + keys + " at their smallest") +
      "; set strata.cpu_memory to at least " + std::to_string(b.minimum_cpu_bytes) +
      (b.free.empty() ? " or write the sizing keys \"auto\"" : "") + "\n" +
      FormatTierTable(b.minimum, std::nullopt, caps) + "needed:\n" + FormatPlanItems(b.minimum));
}

Result<BudgetPlan> PlanWithinCpuBudget(const ModelShape& model, const Config& config,
                                       const PlanOptions& options, uint64_t cpu_bytes,
                                       const std::vector<std::string>& free_keys) {
  STRATA_ASSIGN_OR_RETURN(BudgetPlan b,
                          SearchWithinCpuBudget(model, config, options, cpu_bytes, free_keys));
  if (!b.fits) return CpuBudgetRefusal(b, cpu_bytes);
  return b;
}

}  // namespace strata
