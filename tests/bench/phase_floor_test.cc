// bench/overlap's phase floor: on random phase parts it is never below the plain bound (the max
// of the whole step's CPU work, NVMe and link terms), equals a brute-force search over where the
// Adam seconds go (a fine grid of splits between the two phases), and names what formed it.
#include "bench/overlap/phase_floor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace strata::bench {
namespace {

TEST(PhaseFloorTest, IsAtLeastTheBoundAndTheBestAdamPlacement) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> u(0.0, 0.1);
  for (int trial = 0; trial < 2000; ++trial) {
    PhaseWork f{u(rng), u(rng), u(rng)}, b{u(rng), u(rng), u(rng)};
    const double adam = u(rng), nvme = trial % 3 == 0 ? 2 * u(rng) : 0.0;
    const PhaseFloor got = ComputePhaseFloor(f, b, adam, nvme);
    // The plain bound, in long double from the parts.
    const long double cpu = static_cast<long double>(f.compute_s) + f.copies_cpu_s + b.compute_s +
                            b.copies_cpu_s + adam;
    const long double link = static_cast<long double>(f.link_s) + b.link_s;
    const long double bound = std::max({cpu, link, static_cast<long double>(nvme)});
    EXPECT_GE(static_cast<long double>(got.floor_s), bound - 1e-12L) << "trial " << trial;
    // Brute force: Adam split a1 + a2 = adam, each phase max(cpu + a_i, link).
    long double best = 1e9L;
    const int steps = 20000;
    for (int k = 0; k <= steps; ++k) {
      const long double a1 = static_cast<long double>(adam) * k / steps, a2 = adam - a1;
      const long double fw = std::max<long double>(f.cpu_s() + a1, f.link_s);
      const long double bw = std::max<long double>(b.cpu_s() + a2, b.link_s);
      best = std::min(best, fw + bw);
    }
    best = std::max(best, static_cast<long double>(nvme));
    EXPECT_NEAR(static_cast<double>(best), got.floor_s, 1e-5) << "trial " << trial;
    if (nvme > 0 && static_cast<long double>(nvme) >= best + 1e-9L) {
      EXPECT_EQ(got.formed_by, "nvme bytes / aio read+write speed");
    }
  }
}

TEST(PhaseFloorTest, NamesTheBusiestSideOfEachPhase) {
  // Forward link-bound with 10 ms of idle CPU, backward CPU-bound: 15 ms of Adam, 5 beyond.
  const PhaseFloor f = ComputePhaseFloor({0.020, 0.010, 0.040}, {0.050, 0.010, 0.030}, 0.015, 0);
  EXPECT_NEAR(f.floor_s, 0.040 + 0.060 + 0.005, 1e-12);
  EXPECT_NEAR(f.adam_beyond_slack_s, 0.005, 1e-12);
  EXPECT_EQ(f.formed_by, "forward link + backward cpu + adam beyond the cpu slack");
}

}  // namespace
}  // namespace strata::bench
