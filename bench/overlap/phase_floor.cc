#include "bench/overlap/phase_floor.h"

#include <algorithm>

namespace strata::bench {

// Note [Phase floor]
// The bound (max of the CPU work, the NVMe term and the link term, each over the whole step)
// lets any work share time with any other. A stage-3 step cannot: the next forward's first
// gather needs the first layer's update, whose gradients are the backward's last; and the device
// holds about two modules, so no layer's parameters wait on it from one step's backward to its
// use deep in the next forward. So the forward's gathers (forward_h2d_bytes) cross the link after
// the backward ended, and the gradients (all the D2H) cross during the backward: the phases run
// one after the other, and within one the link and the CPU overlap at best. The CPU Adam of a
// sub-group may run from its gradients' arrival (backward) to its parameters' next gather (the
// next forward), so it fills either phase's idle CPU (the link time beyond the phase's CPU time)
// before it lengthens the step. Hence
//   floor = max(nvme, max(F_cpu, F_link) + max(B_cpu, B_link) + max(0, adam - slack_F - slack_B))
// with the step-phase copies (persistent parameters re-gathered) counted in the backward's. It is
// at least the bound (each phase's max is at least its CPU and its link share) and is what this
// engine's gather policy could reach at best: the byte counts are its own.
PhaseFloor ComputePhaseFloor(const PhaseWork& forward, const PhaseWork& backward, double adam_s,
                             double nvme_s) {
  const double slack = std::max(0.0, forward.link_s - forward.cpu_s()) +
                       std::max(0.0, backward.link_s - backward.cpu_s());
  PhaseFloor f;
  f.adam_beyond_slack_s = std::max(0.0, adam_s - slack);
  f.floor_s = forward.busiest_s() + backward.busiest_s() + f.adam_beyond_slack_s;
  auto side = [](const PhaseWork& p) { return p.link_s > p.cpu_s() ? "link" : "cpu"; };
  f.formed_by = std::string("forward ") + side(forward) + " + backward " + side(backward) +
                " + adam beyond the cpu slack";
  if (nvme_s > f.floor_s) {
    f.floor_s = nvme_s;
    f.formed_by = "nvme bytes / aio read+write speed";
  }
  return f;
}

nlohmann::json PhaseFloorJson(const PhaseWork& forward, const PhaseWork& backward, double adam_s,
                              double nvme_s, const PhaseFloor& f) {
  auto phase = [](const PhaseWork& p) {
    return nlohmann::json{{"compute_s", p.compute_s},
                          {"copies_cpu_s", p.copies_cpu_s},
                          {"cpu_s", p.cpu_s()},
                          {"link_s", p.link_s}};
  };
  return {{"forward", phase(forward)},
          {"backward", phase(backward)},
          {"adam_s", adam_s},
          {"adam_beyond_slack_s", f.adam_beyond_slack_s},
          {"nvme_s", nvme_s},
          {"floor_s", f.floor_s},
          {"formed_by", f.formed_by},
          {"note",
           "the bound with the phases' order kept: the next forward's gathers follow the "
           "backward's gradients (Note [Phase floor] in bench/overlap/phase_floor.cc)"}};
}

}  // namespace strata::bench
