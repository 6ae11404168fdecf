// MemoryPlan's text forms (memory_plan.h): the per-tier table, the items, and the fit check.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/units.h"
#include "engine/plan/memory_plan.h"

namespace strata {

namespace {

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string FormatTierTable(const MemoryPlan& plan, const std::optional<TierBytes>& peaks,
                            const std::optional<TierBytes>& capacities) {
  std::string out = Pad("tier", 14) + Pad("planned", 12);
  if (peaks) out += Pad("peak", 12) + Pad("peak/plan", 11);
  if (capacities) out += Pad("capacity", 12) + "fits";
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += "\n";
  for (PlanTier t : kAllPlanTiers) {
    const size_t i = static_cast<size_t>(t);
    const uint64_t planned = plan.tier_bytes[i];
    std::string line = Pad(std::string(PlanTierName(t)), 14) + Pad(FormatBytes(planned), 12);
    if (peaks) {
      const uint64_t peak = (*peaks)[i];
      char ratio[32] = "-";
      if (planned > 0) {
        std::snprintf(ratio, sizeof(ratio), "%.3f",
                      static_cast<double>(peak) / static_cast<double>(planned));
      }
      line += Pad(FormatBytes(peak), 12) + Pad(ratio, 11);
    }
    if (capacities) {
      const uint64_t cap = (*capacities)[i];
      line += Pad(cap == 0 ? std::string("-") : FormatBytes(cap), 12);
      line += cap == 0 || planned <= cap ? "yes" : "does not fit";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string FormatPlanItems(const MemoryPlan& plan) {
  std::vector<PlanItem> items = plan.items;
  std::stable_sort(items.begin(), items.end(),
                   [](const PlanItem& a, const PlanItem& b) { return a.bytes > b.bytes; });
  std::string out;
  for (const PlanItem& it : items) {
    const std::string phase =
        it.phase == PlanPhase::kRun ? "" : "[" + std::string(PlanPhaseName(it.phase)) + "] ";
    out += "  " + Pad(std::string(PlanTierName(it.tier)), 14) + Pad(FormatBytes(it.bytes), 12) +
           phase + it.what + "\n";
  }
  for (const std::string& n : plan.notes) out += "  note: " + n + "\n";
  return out;
}

std::optional<PlanTier> FirstTierThatDoesNotFit(const MemoryPlan& plan,
                                                const TierBytes& capacities) {
  for (PlanTier t : kAllPlanTiers) {
    const size_t i = static_cast<size_t>(t);
    if (capacities[i] != 0 && plan.tier_bytes[i] > capacities[i]) return t;
  }
  return std::nullopt;
}

Status CheckPlanFits(const MemoryPlan& plan, const TierBytes& capacities) {
  const std::optional<PlanTier> bad = FirstTierThatDoesNotFit(plan, capacities);
  if (!bad) return Status::Ok();
  const size_t i = static_cast<size_t>(*bad);
  return OutOfMemoryError(
      "engine memory plan does not fit (" + plan.placement + "): tier " +
      std::string(PlanTierName(*bad)) + " needs " + FormatBytes(plan.tier_bytes[i]) +
      ", capacity " + FormatBytes(capacities[i]) + "\n" +
      FormatTierTable(plan, std::nullopt, capacities) + "needed:\n" + FormatPlanItems(plan));
}

}  // namespace strata
