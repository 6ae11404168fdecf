// OptimizerState split for partial offload (offload_optimizer.ratio < 1): [0, device_numel) in
// device memory, the rest pinned. On the host device (CPU loops on device memory) and
// host_opaque (the device kernels, the GPU code path) the split state must step every sub-group to
// the same bits as the unsplit cpu state, give the squared norm the bits of the plain reference
// order (Note [Squared-norm order]) even where a 4096-element chunk straddles the split, and keep
// Read/Write addressable by flat index across it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/optim/optimizer_state.h"
#include "engine/optim/partial_offload.h"
#include "tests/engine/backend/backend_devices.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::BackendKind;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;
using Array = OptimizerState::Array;

// The documented order, written out plainly: chunks of 4096 from `begin`, each summed in double
// from its first element, chunk sums added left to right.
double ReferenceSquaredNorm(const std::vector<float>& g, size_t begin, size_t end) {
  double total = 0;
  for (size_t c = begin; c < end; c += 4096) {
    double s = 0;
    for (size_t i = c; i < std::min(end, c + 4096); ++i) s += double(g[i]) * double(g[i]);
    total += s;
  }
  return total;
}

class OptimizerStateSplitTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Device>> d = testing::MakeBackendDevice(GetParam());
    if (!d.ok() && d.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << d.status().message();
    }
    ASSERT_THAT(d.status(), IsOk());
    device_ = std::move(d).value();
    // Sub-groups of >= 3000 elements: boundaries at multiples of 64, not of 4096, so chunks of
    // the norm straddle the split.
    const size_t numels[] = {5000, 77, 3100, 9000, 130, 4500, 2000, 6100};
    Result<PartitionLayout> l = PartitionLayout::Create(numels, 1, 0, 64);
    ASSERT_THAT(l.status(), IsOk());
    layout_ = *l;
    groups_ = layout_.SubGroups(3000);
    ASSERT_GE(groups_.size(), 4u);
  }

  std::unique_ptr<OptimizerState> Make(size_t device_numel, float* device_grad = nullptr) {
    OptimizerStateOptions o;
    o.kind = OptimizerKind::kAdam;
    o.hyperparams = DefaultHyperparams(o.kind);
    o.hyperparams.weight_decay = 0.01f;
    o.hyperparams.adam_w_mode = true;
    o.tier = Tier::kCpu;
    o.pin_memory = false;
    o.device_numel = device_numel;
    o.device_grad = device_grad;
    Result<std::unique_ptr<OptimizerState>> s =
        OptimizerState::Create(layout_, o, device_.get(), &budget_);
    EXPECT_THAT(s.status(), IsOk());
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Random master, moments (positive second moment) and gradients, with the padding zero.
  void Fill(OptimizerState& s, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t n = layout_.partition_numel();
    for (Array a : {Array::kMaster, Array::kExpAvg, Array::kExpAvgSq, Array::kGrad}) {
      std::vector<float> v(n, 0.0f);
      for (const ShardSlice& sl : layout_.slices()) {
        for (size_t i = 0; i < sl.valid_numel; ++i) {
          const float x = nd(rng);
          v[sl.flat_offset + i] = a == Array::kExpAvgSq ? x * x * 1e-3f : x;
        }
      }
      ASSERT_THAT(s.Write(a, 0, v), IsOk());
    }
  }

  Status Copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
    STRATA_ASSIGN_OR_RETURN(Stream st, device_->CreateStream());
    Status s = st.CopyAsync(dst, src, bytes, kind);
    if (s.ok()) s = st.Synchronize();
    Status d = device_->DestroyStream(st);
    return s.ok() ? d : s;
  }

  std::vector<float> ReadAll(const OptimizerState& s, Array a) {
    std::vector<float> v(layout_.partition_numel());
    EXPECT_THAT(s.Read(a, 0, v), IsOk());
    return v;
  }

  std::unique_ptr<Device> device_;
  PartitionLayout layout_;
  std::vector<SubGroup> groups_;
  TierBudget budget_;
};

TEST_P(OptimizerStateSplitTest, StepsNormsAndReadsLikeTheUnsplitState) {
  const size_t n = layout_.partition_numel();
  for (double ratio : {0.75, 0.5, 0.25}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    const size_t k = PartialOffloadDeviceGroups(groups_.size(), ratio);
    ASSERT_GT(k, 0u);
    const size_t split = groups_[k - 1].flat_end;
    std::unique_ptr<OptimizerState> whole = Make(0);
    std::unique_ptr<OptimizerState> part = Make(split);
    ASSERT_NE(whole, nullptr);
    ASSERT_NE(part, nullptr);
    EXPECT_TRUE(part->split());
    EXPECT_FALSE(part->host_addressable());
    EXPECT_EQ(part->device_numel(), split);
    EXPECT_EQ(part->master(), nullptr);
    EXPECT_EQ(part->device_bytes(), 16 * split);  // four fp32 arrays, its own gradient
    EXPECT_EQ(part->cpu_bytes(), 16 * (n - split));
    EXPECT_EQ(whole->cpu_bytes(), 16 * n);
    Fill(*whole, 11);
    Fill(*part, 11);

    // Same arrays through Read, across the split.
    for (Array a : {Array::kMaster, Array::kExpAvg, Array::kExpAvgSq, Array::kGrad}) {
      EXPECT_EQ(ReadAll(*whole, a), ReadAll(*part, a));
    }
    std::vector<float> across(300);
    ASSERT_THAT(part->Read(Array::kGrad, split - 100, across), IsOk());
    const std::vector<float> g = ReadAll(*whole, Array::kGrad);
    EXPECT_EQ(std::memcmp(across.data(), g.data() + split - 100, 300 * sizeof(float)), 0);

    // The norm: the reference's bits, whole and on ranges that start or end in either part.
    const double want = ReferenceSquaredNorm(g, 0, n);
    const double unsplit = whole->GradSquaredNorm(0, n);
    EXPECT_EQ(std::memcmp(&want, &unsplit, sizeof(double)), 0);
    const double got = part->GradSquaredNorm(0, n);
    EXPECT_EQ(std::memcmp(&want, &got, sizeof(double)), 0) << got << " vs " << want;
    for (auto [b, e] : {std::pair<size_t, size_t>{split - 5000, split + 7000},
                        {1, split + 1},
                        {split - 1, n},
                        {split, n},
                        {0, split}}) {
      const double r = ReferenceSquaredNorm(g, b, e);
      const double p = part->GradSquaredNorm(b, e);
      EXPECT_EQ(std::memcmp(&r, &p, sizeof(double)), 0) << "[" << b << ", " << e << ")";
    }
    EXPECT_FALSE(part->GradHasNonFinite(0, n));

    // Every sub-group steps to the same bits, with the bf16 copy of the updated weights.
    std::vector<uint16_t> copy_whole(n, 0), copy_part(n, 0);
    Result<void*> dev_copy = device_->Allocate(n * sizeof(uint16_t));
    ASSERT_THAT(dev_copy.status(), IsOk());
    Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
    hp.lr = 1e-2f;
    hp.weight_decay = 0.01f;
    for (int step = 1; step <= 2; ++step) {
      for (const SubGroup& sg : groups_) {
        ASSERT_THAT(whole->StepSubGroup(sg, step, hp, 0.5f, copy_whole.data(), DType::kBFloat16),
                    IsOk());
        void* dst = sg.flat_end <= split ? *dev_copy : static_cast<void*>(copy_part.data());
        ASSERT_THAT(part->StepSubGroup(sg, step, hp, 0.5f, dst, DType::kBFloat16), IsOk());
      }
    }
    ASSERT_THAT(
        Copy(copy_part.data(), *dev_copy, split * sizeof(uint16_t), CopyKind::kDeviceToHost),
        IsOk());
    ASSERT_THAT(device_->Free(*dev_copy), IsOk());
    for (Array a : {Array::kMaster, Array::kExpAvg, Array::kExpAvgSq}) {
      const std::vector<float> w = ReadAll(*whole, a), p = ReadAll(*part, a);
      EXPECT_EQ(std::memcmp(w.data(), p.data(), n * sizeof(float)), 0);
    }
    EXPECT_EQ(copy_whole, copy_part);

    // Non-finite gradients are seen in either part; ZeroGrad clears both.
    for (size_t at : {split / 2, split + (n - split) / 2}) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      ASSERT_THAT(part->Write(Array::kGrad, at, {&nan, 1}), IsOk());
      EXPECT_TRUE(part->GradHasNonFinite(0, n)) << at;
      EXPECT_FALSE(part->GradHasNonFinite(at + 1, n)) << at;
      part->ZeroGrad();
      EXPECT_FALSE(part->GradHasNonFinite(0, n));
    }
    EXPECT_EQ(part->GradSquaredNorm(0, n), 0.0);
    EXPECT_THAT(part->status(), IsOk());
  }
}

TEST_P(OptimizerStateSplitTest, UsesTheCallersDeviceGradient) {
  const size_t n = layout_.partition_numel();
  const size_t split = groups_[1].flat_end;
  Result<void*> grad = device_->Allocate(n * sizeof(float));
  ASSERT_THAT(grad.status(), IsOk());
  {
    std::unique_ptr<OptimizerState> s = Make(split, static_cast<float*>(*grad));
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->device_bytes(), 3 * split * sizeof(float));  // no gradient of its own
    std::vector<float> ones(n, 1.0f);
    ASSERT_THAT(Copy(*grad, ones.data(), n * sizeof(float), CopyKind::kHostToDevice), IsOk());
    // The device part reads the caller's array; the CPU part its own (still zero).
    EXPECT_EQ(s->GradSquaredNorm(0, n), static_cast<double>(split));
    std::vector<float> g(n);
    ASSERT_THAT(s->Read(Array::kGrad, 0, g), IsOk());
    EXPECT_EQ(g[split - 1], 1.0f);
    EXPECT_EQ(g[split], 0.0f);
    EXPECT_NE(s->host_grad(), nullptr);
  }
  ASSERT_THAT(device_->Free(*grad), IsOk());
}

TEST_P(OptimizerStateSplitTest, RefusesASubGroupAcrossTheSplit) {
  const size_t split = groups_[1].flat_end;
  std::unique_ptr<OptimizerState> s = Make(split);
  ASSERT_NE(s, nullptr);
  SubGroup across = groups_[1];
  across.flat_end = groups_[2].flat_end;
  EXPECT_THAT(s->StepSubGroup(across, 1, DefaultHyperparams(OptimizerKind::kAdam), 1.0f, nullptr,
                              DType::kFloat32),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("straddles the device/CPU split")));
  OptimizerStateOptions o;
  o.tier = Tier::kCpu;
  o.device_numel = layout_.partition_numel() + 1;
  EXPECT_THAT(OptimizerState::Create(layout_, o, device_.get(), &budget_).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("larger than the partition")));
}

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerStateSplitTest,
                         ::testing::Values(BackendKind::kHost, BackendKind::kHostOpaque,
                                           BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& i) {
                           return testing::BackendName(i.param);
                         });

}  // namespace
}  // namespace strata
