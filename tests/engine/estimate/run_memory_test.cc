// PageableSampler (engine/plan/run_memory.h): a sample is the RSS growth less the pinned bytes
// in use at that same moment, so memory charged to the pinned tier while it is held is not
// counted as pageable, and plain touched memory is.
#include "engine/plan/run_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(PageableSamplerTest, CountsTouchedMemoryButNotThePinnedInUse) {
  DeviceOptions dev;
  dev.host.memory_bytes = 16 * kMiB;
  dev.host.populate_memory = false;
  std::unique_ptr<Device> device = CreateDevice(dev).value();
  TierBudget budget;
  const MemoryBaseline base = MemoryBaseline::Take();
  PageableSampler sampler(*device, budget, base);
  const uint64_t before = sampler.peak_bytes();  // peak_bytes() samples now as well
  {
    // Charged to the pinned tier before it is touched and freed before it is released: every
    // sample sees it as pinned.
    ASSERT_THAT(budget.Reserve(Tier::kCpu, 64 * kMiB, "test"), IsOk());
    auto pinned = std::make_unique<std::vector<char>>(64 * kMiB, 1);
    EXPECT_LT(sampler.peak_bytes(), before + 16 * kMiB);
    pinned.reset();
    budget.Release(Tier::kCpu, 64 * kMiB);
  }
  {
    const std::vector<char> pageable(48 * kMiB, 1);  // touched, charged to no tier
    EXPECT_GE(sampler.peak_bytes(), before + 46 * kMiB);
  }
  // Freed: the peak stays.
  EXPECT_GE(sampler.peak_bytes(), before + 46 * kMiB);
}

}  // namespace
}  // namespace strata
