// The busy-cores floor of a step (Note [Busy cores floor] in busy_cores_floor.cc): a lower bound
// on this machine, where the disk runs slower while every core is busy (measured by the sweep
// beside idle spinners, bench/overlap/bound_parts.h) and the step's CPU work must run on the same
// cores. Not a target's reference: it says how far below the phase floor no schedule can go here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace strata::bench {

struct BusyCoresParts {
  double work_cpu_s = 0;    // the step's CPU work in core-seconds, each part measured on one core
  int cores = 2;            // the machine's cores
  double nvme_alone_s = 0;  // the step's NVMe bytes at the speed of the disk alone
  double nvme_busy_s = 0;   // the same bytes at its speed beside every core busy
};

struct BusyCoresFloor {
  double floor_s = 0;
  double below_all_busy_s = 0;  // time with at most cores - 1 busy: the disk at its own speed
  double all_busy_s = 0;        // time with every core busy: the disk at its busy speed
  std::string formed_by;
};

// The least t1 + t2 with (cores - 1) t1 + cores t2 >= work_cpu_s and
// t1 / nvme_alone_s + t2 / nvme_busy_s >= 1 (t1, t2 >= 0).
BusyCoresFloor ComputeBusyCoresFloor(const BusyCoresParts& p);

nlohmann::json BusyCoresFloorJson(const BusyCoresParts& p, const BusyCoresFloor& f);

}  // namespace strata::bench
