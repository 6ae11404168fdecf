#include "engine/optim/optimizer_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

struct Fixture {
  std::unique_ptr<Device> device;
  PartitionLayout layout;
};

Fixture MakeFixture(std::mt19937_64& rng) {
  DeviceOptions o;
  o.host.memory_bytes = 64 << 20;
  Fixture f;
  f.device = std::move(CreateDevice(o).value());
  std::vector<size_t> numels;
  for (int i = 0; i < 7; ++i) numels.push_back(1 + rng() % 3000);
  f.layout = PartitionLayout::Create(numels, 2, 1, 64).value();
  return f;
}

// Fills master and grad at the slots' valid elements only (padding stays zero, as the engine
// keeps it).
void Fill(const PartitionLayout& l, OptimizerState& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const ShardSlice& sl : l.slices()) {
    for (size_t i = 0; i < sl.valid_numel; ++i) {
      s.master()[sl.flat_offset + i] = d(rng);
      s.grad()[sl.flat_offset + i] = d(rng) * 0.1f;
    }
  }
}

TEST(OptimizerStateTest, DeviceAndCpuTiersStepBitwiseAlikeAndPaddingStaysZero) {
  std::mt19937_64 rng(testing::TestSeed());
  Fixture f = MakeFixture(rng);
  OptimizerStateOptions o;
  o.hyperparams.weight_decay = 0.01f;
  o.tier = Tier::kDevice;
  auto on_device = OptimizerState::Create(f.layout, o, f.device.get(), nullptr);
  ASSERT_THAT(on_device.status(), IsOk());
  o.tier = Tier::kCpu;
  o.pin_memory = false;
  auto on_cpu = OptimizerState::Create(f.layout, o, f.device.get(), nullptr);
  ASSERT_THAT(on_cpu.status(), IsOk());
  const uint64_t seed = rng();
  Fill(f.layout, **on_device, seed);
  Fill(f.layout, **on_cpu, seed);

  const size_t n = f.layout.partition_numel();
  std::vector<uint16_t> copy_a(n), copy_b(n);
  for (int64_t step = 1; step <= 3; ++step) {
    for (const SubGroup& g : f.layout.SubGroups(2000)) {
      ASSERT_THAT(
          (*on_device)->StepSubGroup(g, step, o.hyperparams, 0.5f, copy_a.data(), DType::kBFloat16),
          IsOk());
      ASSERT_THAT(
          (*on_cpu)->StepSubGroup(g, step, o.hyperparams, 0.5f, copy_b.data(), DType::kBFloat16),
          IsOk());
    }
  }
  EXPECT_EQ(std::memcmp((*on_device)->master(), (*on_cpu)->master(), n * 4), 0);
  EXPECT_EQ(std::memcmp((*on_device)->exp_avg_sq(), (*on_cpu)->exp_avg_sq(), n * 4), 0);
  EXPECT_EQ(copy_a, copy_b);
  // The bf16 copy is the rounded master; padding is zero in master and copy.
  std::vector<bool> valid(n, false);
  for (const ShardSlice& sl : f.layout.slices()) {
    for (size_t i = 0; i < sl.valid_numel; ++i) valid[sl.flat_offset + i] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!valid[i]) {
      ASSERT_EQ((*on_cpu)->master()[i], 0.0f) << i;
      ASSERT_EQ(copy_b[i], 0) << i;
    } else {
      ASSERT_EQ(copy_b[i], FloatToBf16((*on_cpu)->master()[i])) << i;
    }
  }
}

TEST(OptimizerStateTest, StepMatchesTheOptimizerOnPlainArrays) {
  std::mt19937_64 rng(testing::TestSeed());
  Fixture f = MakeFixture(rng);
  OptimizerStateOptions o;
  o.tier = Tier::kCpu;
  o.pin_memory = false;
  auto s = OptimizerState::Create(f.layout, o, f.device.get(), nullptr);
  ASSERT_THAT(s.status(), IsOk());
  Fill(f.layout, **s, rng());
  const size_t n = f.layout.partition_numel();
  std::vector<float> p((*s)->master(), (*s)->master() + n), g((*s)->grad(), (*s)->grad() + n),
      m(n, 0.0f), v(n, 0.0f);
  CpuOptimizer plain = CpuOptimizer::Create(OptimizerKind::kAdam).value();
  StepTensors t{n, p.data(), g.data(), DType::kFloat32, m.data(), v.data()};
  StepOptions so;
  so.grad_scale = 0.25f;
  ASSERT_THAT(plain.StepAt(o.hyperparams, 1, t, so), IsOk());
  for (const SubGroup& grp : f.layout.SubGroups(1500)) {
    ASSERT_THAT((*s)->StepSubGroup(grp, 1, o.hyperparams, 0.25f, nullptr, DType::kFloat32), IsOk());
  }
  EXPECT_EQ(std::memcmp((*s)->master(), p.data(), n * 4), 0);
}

TEST(OptimizerStateTest, NormAndFiniteChecksSeeTheGradients) {
  std::mt19937_64 rng(testing::TestSeed());
  Fixture f = MakeFixture(rng);
  OptimizerStateOptions o;
  o.tier = Tier::kDevice;
  auto s = OptimizerState::Create(f.layout, o, f.device.get(), nullptr);
  ASSERT_THAT(s.status(), IsOk());
  Fill(f.layout, **s, rng());
  const size_t n = (*s)->numel();
  double ref = 0;
  for (size_t i = 0; i < n; ++i) ref += double((*s)->grad()[i]) * (*s)->grad()[i];
  EXPECT_NEAR((*s)->GradSquaredNorm(0, n), ref, 1e-9 * ref);
  EXPECT_FALSE((*s)->GradHasNonFinite(0, n));
  (*s)->grad()[n / 2] = INFINITY;
  EXPECT_TRUE((*s)->GradHasNonFinite(0, n));
  (*s)->ZeroGrad();
  EXPECT_EQ((*s)->GradSquaredNorm(0, n), 0.0);
}

}  // namespace
}  // namespace strata
