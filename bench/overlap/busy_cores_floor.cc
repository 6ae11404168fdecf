#include "bench/overlap/busy_cores_floor.h"

#include <algorithm>
#include <limits>

namespace strata::bench {

// Note [Busy cores floor]
// On the machines this bench has run on, the disk loses 15-40% of its speed while every core is
// busy, whatever the busy threads' priority (SCHED_IDLE spinners included: docs/infinity.md,
// 2026-12-02), and nothing while one core of two is. The bound and the phase floor take the disk's
// speed alone, so a step that computes on every core while its NVMe bytes move cannot reach them.
// How far that alone keeps a step above them: split the step's time into t1, with at most
// cores - 1 cores busy (the disk at its own speed, the CPU work progressing at cores - 1
// core-seconds a second at best), and t2, with every core busy (the disk at the speed the sweep
// beside idle spinners measured, the work at cores core-seconds a second). Any schedule needs
//   (cores - 1) t1 + cores t2 >= work   and   t1 / nvme_alone + t2 / nvme_busy >= 1,
// so the step is at least the least t1 + t2 of that linear program: at a vertex, t1 alone, t2
// alone, or where both lines cross. The work is each part's time on one core (a CPU second the
// part cannot do without: a parallel run's own CPU seconds count the idle spinning of its
// threads), and the I/O path's own CPU is left out: both make the floor lower, so it stays a
// floor. It ignores the phases' order, so the larger of it and the phase floor is a floor too.
BusyCoresFloor ComputeBusyCoresFloor(const BusyCoresParts& p) {
  const double w = std::max(0.0, p.work_cpu_s);
  const double c = std::max(1, p.cores), a = c - 1;
  BusyCoresFloor f;
  if (p.nvme_alone_s <= 0 || p.nvme_busy_s <= 0) {  // no disk term: the work on every core
    f.all_busy_s = f.floor_s = w / c;
    f.formed_by = "cpu work on every core (no nvme bytes)";
    return f;
  }
  const double da = p.nvme_alone_s, db = p.nvme_busy_s;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // t2 = 0: the work on cores - 1 cores, the disk at its own speed.
  const double t1_only = std::max(a > 0 ? w / a : (w > 0 ? kInf : 0.0), da);
  // t1 = 0: every core busy throughout.
  const double t2_only = std::max(w / c, db);
  f.floor_s = t1_only;
  f.below_all_busy_s = t1_only;
  f.all_busy_s = 0;
  f.formed_by = t1_only == da ? "nvme at the disk's own speed (the cpu work fits on cores - 1)"
                              : "cpu work on cores - 1 (the disk at its own speed)";
  if (t2_only < f.floor_s) {
    f.floor_s = t2_only;
    f.below_all_busy_s = 0;
    f.all_busy_s = t2_only;
    f.formed_by =
        t2_only == db ? "nvme at the disk's speed beside busy cores" : "cpu work on every core";
  }
  // Both constraints tight: a t1 + c t2 = w, t1 / da + t2 / db = 1.
  const double det = a / db - c / da;
  if (det != 0) {
    const double t1 = (w / db - c) / det;
    const double t2 = (a - w / da) / det;
    if (t1 >= 0 && t2 >= 0 && t1 + t2 < f.floor_s) {
      f.floor_s = t1 + t2;
      f.below_all_busy_s = t1;
      f.all_busy_s = t2;
      f.formed_by = "cpu work and nvme, split between cores - 1 busy and every core busy";
    }
  }
  return f;
}

nlohmann::json BusyCoresFloorJson(const BusyCoresParts& p, const BusyCoresFloor& f) {
  return {{"work_cpu_s", p.work_cpu_s},
          {"cores", p.cores},
          {"nvme_alone_s", p.nvme_alone_s},
          {"nvme_busy_s", p.nvme_busy_s},
          {"floor_s", f.floor_s},
          {"below_all_busy_s", f.below_all_busy_s},
          {"all_busy_s", f.all_busy_s},
          {"formed_by", f.formed_by},
          {"note",
           "not a target's reference: the least step with the disk at its speed beside idle "
           "spinners whenever every core is busy and the work's one-core seconds to do (Note "
           "[Busy cores floor] in bench/overlap/busy_cores_floor.cc)"}};
}

}  // namespace strata::bench
