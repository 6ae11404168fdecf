// The phase floor of a stage-3 step: the bound (bench/overlap/size_run.cc) with the order its
// phases must keep (Note [Phase floor] in phase_floor.cc). The forward of step k+1 cannot start
// before step k's backward ends, and the link's forward-phase copies cannot share time with the
// backward's gradient copies, so the step takes at least the sum over the phases of each phase's
// busiest resource, with the CPU Adam (which may run in either phase) put where it costs least.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace strata::bench {

// One phase's work, each measured alone (seconds).
struct PhaseWork {
  double compute_s = 0;     // the model's forward (or backward) with every parameter resident
  double copies_cpu_s = 0;  // the phase's link bytes / memcpy speed (a paced copy's CPU time)
  double link_s = 0;        // the phase's link bytes / link speed (H2D and D2H run side by side)
  double cpu_s() const { return compute_s + copies_cpu_s; }
  double busiest_s() const { return cpu_s() > link_s ? cpu_s() : link_s; }
};

struct PhaseFloor {
  double floor_s = 0;
  double adam_beyond_slack_s = 0;  // the Adam seconds no phase's idle CPU could hide
  std::string formed_by;
};

// max(nvme_s, forward's busiest + backward's busiest + the Adam seconds beyond the phases' CPU
// slack (link time minus CPU time, where positive)).
PhaseFloor ComputePhaseFloor(const PhaseWork& forward, const PhaseWork& backward, double adam_s,
                             double nvme_s);

// The JSON the bench prints for it: both phases' parts, the floor and how it was formed.
nlohmann::json PhaseFloorJson(const PhaseWork& forward, const PhaseWork& backward, double adam_s,
                              double nvme_s, const PhaseFloor& f);

}  // namespace strata::bench
