// bench/overlap's busy-cores floor: on random parts it equals a brute-force search over how long
// every core is busy (for each such time, the least time with a core free that does the rest of
// the work and the rest of the disk's bytes), is never below the disk alone nor the work on every
// core, and names what formed it.
#include "bench/overlap/busy_cores_floor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace strata::bench {
namespace {

long double BruteForce(const BusyCoresParts& p) {
  const long double c = p.cores, a = c - 1, w = p.work_cpu_s;
  const long double da = p.nvme_alone_s, db = p.nvme_busy_s;
  // t2 beyond max(w / c, db) only adds time.
  const long double t2_max = std::max(w / c, db);
  long double best = 1e30L;
  const int steps = 200000;
  for (int k = 0; k <= steps; ++k) {
    const long double t2 = k == steps ? t2_max : t2_max * k / steps;
    long double t1 = std::max<long double>(0, da * (1 - t2 / db));
    const long double rest = w - c * t2;
    if (rest > 0) {
      if (a == 0) continue;  // one core: no time with a core free does any work
      t1 = std::max(t1, rest / a);
    }
    best = std::min(best, t1 + t2);
  }
  return best;
}

TEST(BusyCoresFloorTest, EqualsTheBestSplitOfBusyTime) {
  std::mt19937_64 rng(4321);
  std::uniform_real_distribution<double> u(0.001, 0.3);
  for (int trial = 0; trial < 500; ++trial) {
    BusyCoresParts p;
    p.cores = 1 + trial % 4;
    p.work_cpu_s = u(rng);
    p.nvme_alone_s = u(rng);
    p.nvme_busy_s = p.nvme_alone_s * (1.0 + u(rng) * 2);  // the disk slower beside busy cores
    const BusyCoresFloor got = ComputeBusyCoresFloor(p);
    EXPECT_NEAR(static_cast<double>(BruteForce(p)), got.floor_s, 2e-5) << "trial " << trial;
    EXPECT_GE(got.floor_s, p.nvme_alone_s - 1e-12);
    EXPECT_GE(got.floor_s, p.work_cpu_s / p.cores - 1e-12);
    EXPECT_NEAR(got.below_all_busy_s + got.all_busy_s, got.floor_s, 1e-12);
  }
}

TEST(BusyCoresFloorTest, SplitsWhenTheWorkOverflowsACore) {
  // 2 cores, 0.26 core-s of work, the disk 0.118 s alone and 0.152 s beside busy cores: neither
  // extreme (0.26 s on one core, 0.152 s all busy) is best. Solving by hand:
  // t1 + 2 t2 = 0.26 and t1 / 0.118 + t2 / 0.152 = 1.
  const BusyCoresParts p{0.26, 2, 0.118, 0.152};
  const BusyCoresFloor f = ComputeBusyCoresFloor(p);
  const double t2 = (1 - 0.26 / 0.118) / (1 / 0.152 - 2 / 0.118), t1 = 0.26 - 2 * t2;
  EXPECT_NEAR(f.all_busy_s, t2, 1e-12);
  EXPECT_NEAR(f.below_all_busy_s, t1, 1e-12);
  EXPECT_EQ(f.formed_by, "cpu work and nvme, split between cores - 1 busy and every core busy");
  // Work that fits on the free core leaves the disk alone the floor.
  const BusyCoresFloor light = ComputeBusyCoresFloor({0.05, 2, 0.118, 0.152});
  EXPECT_DOUBLE_EQ(light.floor_s, 0.118);
  EXPECT_EQ(light.formed_by, "nvme at the disk's own speed (the cpu work fits on cores - 1)");
  // No disk bytes: the work on every core.
  const BusyCoresFloor cpu = ComputeBusyCoresFloor({1.5, 2, 0, 0});
  EXPECT_DOUBLE_EQ(cpu.floor_s, 0.75);
}

}  // namespace
}  // namespace strata::bench
