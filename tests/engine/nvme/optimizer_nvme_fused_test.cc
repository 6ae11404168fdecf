// NvmeOptimizerState's fused update (engine/nvme/optimizer_nvme_fused.cc, Note [Fused checksums]):
// the asynchronous path updates a slot in block-sized pieces with the swap checksums verified and
// computed on the way. It gives the bits of OptimizerState on the CPU tier (one update per
// sub-group), its write checksums are the ones a verified read accepts, and a block corrupted on
// disk - in any of the three parts or straddling two - fails the update with DataLoss naming
// tensor, file and offset, before anything is written back.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/optimizer_state.h"
#include "tests/engine/nvme/nvme_state_helpers.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using nvme_test::CpuTierReference;
using nvme_test::Normal;
using nvme_test::Options;
using nvme_test::SeedBoth;
using nvme_test::StateDiffers;
using nvme_test::TestHyperparams;
using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kSwapFile[] = "strata-optimizer-rank0.swap";

void FlipByte(const std::string& file, off_t offset) {
  int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
  b ^= 0x21;
  ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
  // No fsync: an O_DIRECT read writes the dirty range back first.
  ::close(fd);
}

// StepAt over block-sized sub-ranges (the fused update's pieces) gives the bits of one call.
TEST(NvmeFusedChecksumTest, StepAtOnPiecesEqualsOneCall) {
  std::mt19937_64 rng(TestSeed());
  const size_t n = 700'001;
  auto opt = CpuOptimizer::Create(OptimizerKind::kAdam);
  ASSERT_THAT(opt, IsOk());
  for (const DType copy_dtype : {DType::kBFloat16, DType::kFloat16}) {
    const std::vector<float> p0 = Normal(n, rng, 1), m0 = Normal(n, rng, 0.1f),
                             v0 = Normal(n, rng, 0.01f, true), g = Normal(n, rng, 0.1f);
    std::vector<float> p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
    std::vector<uint16_t> c1(n), c2(n);
    StepOptions so;
    so.grad_scale = 0.75f;
    StepTensors t{n,         p1.data(), g.data(),  DType::kFloat32,
                  m1.data(), v1.data(), c1.data(), copy_dtype};
    ASSERT_THAT(opt->StepAt(TestHyperparams(), 3, t, so), IsOk());
    for (size_t e0 = 0; e0 < n; e0 += 262'144) {
      const size_t e1 = std::min(n, e0 + 262'144);
      StepTensors s{e1 - e0,        p2.data() + e0, g.data() + e0,  DType::kFloat32,
                    m2.data() + e0, v2.data() + e0, c2.data() + e0, copy_dtype};
      ASSERT_THAT(opt->StepAt(TestHyperparams(), 3, s, so), IsOk());
    }
    EXPECT_EQ(0, std::memcmp(p1.data(), p2.data(), n * 4));
    EXPECT_EQ(0, std::memcmp(m1.data(), m2.data(), n * 4));
    EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), n * 4));
    EXPECT_EQ(c1, c2);
  }
}

struct FusedMode {
  DType copy_dtype;
  bool has_copy;
  bool checksums;
};

std::string FusedModeName(const ::testing::TestParamInfo<FusedMode>& i) {
  return std::string(i.param.has_copy ? DTypeName(i.param.copy_dtype) : "nocopy") +
         (i.param.checksums ? "_checksums" : "_nochecksums");
}

// Parameters of several sizes, none a multiple of the checksum block or of the norm's chunk,
// aligned to 64 elements.
PartitionLayout SixParameterLayout() {
  const std::vector<size_t> numels = {1000, 300'001, 524'305, 77, 262'144, 33};
  return PartitionLayout::Create(numels, 1, 0, 64).value();
}

class NvmeFusedBitwiseTest : public ::testing::TestWithParam<FusedMode> {};

// Three steps through the asynchronous path (the overlapped worker's calls, StepExcept's
// StepAsync, and updates of slots whose write is still in flight) against OptimizerState on the
// CPU tier; sub-groups of several sizes, none a multiple of the checksum block.
TEST_P(NvmeFusedBitwiseTest, AsyncStepsEqualCpuOptimizerStateBitwise) {
  const FusedMode mode = GetParam();
  ScratchDir dir;
  const PartitionLayout layout = SixParameterLayout();
  const std::vector<SubGroup> groups = layout.SubGroups(250'000);
  ASSERT_GE(groups.size(), 3u);
  const size_t n = layout.partition_numel();
  std::unique_ptr<OptimizerState> ref = CpuTierReference(layout);
  ASSERT_NE(ref, nullptr);
  auto nvme =
      NvmeOptimizerState::Create(layout, groups, Options(dir, 2, mode.checksums), nullptr, nullptr);
  ASSERT_THAT(nvme.status(), IsOk());
  NvmeOptimizerState& s = **nvme;
  std::mt19937_64 rng(TestSeed());
  ASSERT_THAT(SeedBoth(*ref, s, n, rng), IsOk());

  const size_t cbytes = DTypeBytes(mode.copy_dtype);
  std::vector<uint8_t> copy_ref(n * cbytes, 0xAB), copy_nvme(n * cbytes, 0xCD);
  void* cr = mode.has_copy ? copy_ref.data() : nullptr;
  void* cn = mode.has_copy ? copy_nvme.data() : nullptr;
  const int sgs = s.num_sub_groups();
  std::vector<int> order(static_cast<size_t>(sgs));
  for (int i = 0; i < sgs; ++i) order[static_cast<size_t>(i)] = i;
  for (int step = 1; step <= 4; ++step) {
    const std::vector<float> g = Normal(n, rng, 0.1f);
    std::memcpy(ref->grad(), g.data(), n * 4);
    std::memcpy(s.grad(), g.data(), n * 4);
    Hyperparams hp = TestHyperparams();
    hp.lr /= static_cast<float>(step);
    const float scale = 0.5f + 0.25f * static_cast<float>(step);
    for (const SubGroup& sg : groups) {
      ASSERT_THAT(ref->StepSubGroup(sg, step, hp, scale, cr, mode.copy_dtype), IsOk());
    }
    if (step == 2) {
      // StepExcept's asynchronous path (something read ahead, so not the swapper's Step).
      bool helps = false;
      ASSERT_THAT(s.ReadAhead(order, &helps), IsOk());
      ASSERT_TRUE(s.async_busy());
      ASSERT_THAT(s.StepExcept(step, hp, scale, cn, mode.copy_dtype,
                               std::vector<char>(static_cast<size_t>(sgs), 0)),
                  IsOk());
    } else {
      // The overlapped worker's calls; at step 3 the slots still hold step 2's writes.
      ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
      for (int i = 0; i < sgs; ++i) {
        const std::span<const int> rest(order.data() + i, order.size() - static_cast<size_t>(i));
        const std::span<const int> keep = rest.first(std::min<size_t>(rest.size(), 2));
        bool helps = false;
        ASSERT_THAT(s.ReadAhead(rest, &helps), IsOk());
        auto st = s.AcquireState(i, keep, true);
        ASSERT_THAT(st.status(), IsOk());
        ASSERT_THAT(s.UpdateSubGroup(i, step, hp, scale, st->params, st->exp_avg, st->exp_avg_sq,
                                     cn, mode.copy_dtype),
                    IsOk());
        ASSERT_THAT(s.WriteBack(i), IsOk());
      }
    }
    if (step == 1) {
      ASSERT_THAT(s.DrainAsync(), IsOk());  // step 2 reads everything back
    }
    if (!mode.has_copy) continue;
    ASSERT_EQ(0, std::memcmp(copy_ref.data(), copy_nvme.data(), copy_ref.size()))
        << "copy-out differs at step " << step;
  }
  // Verified reads of what the fused updates wrote: their checksums are right.
  EXPECT_EQ(StateDiffers(s, *ref, n), "");
}

INSTANTIATE_TEST_SUITE_P(Modes, NvmeFusedBitwiseTest,
                         ::testing::Values(FusedMode{DType::kBFloat16, true, true},
                                           FusedMode{DType::kFloat16, true, true},
                                           FusedMode{DType::kFloat32, true, true},
                                           FusedMode{DType::kBFloat16, false, true},
                                           FusedMode{DType::kBFloat16, true, false}),
                         FusedModeName);

// Note [Sums for the writes to come]: an update hashes its state for a write only when the state
// was written to NVMe since its last update. With every state kept in the buffers a second step
// hashes nothing and writes nothing; the drain's writes then hash their states themselves, a
// verified read accepts what they wrote and rejects a flipped byte. With one buffer every state
// is written between its updates, so each update hashes for its write and no write hashes.
TEST(NvmeFusedChecksumTest, AnUpdateHashesForAWriteOnlyWhenItsStateWasWrittenSinceItsLast) {
  for (const size_t buffers : {size_t{8}, size_t{1}}) {
    SCOPED_TRACE("buffers " + std::to_string(buffers));
    ScratchDir dir;
    const PartitionLayout layout = SixParameterLayout();
    const std::vector<SubGroup> groups = layout.SubGroups(250'000);
    ASSERT_GE(groups.size(), 3u);
    ASSERT_LT(groups.size(), 8u);  // buffers 8: every state fits
    const size_t n = layout.partition_numel();
    std::unique_ptr<OptimizerState> ref = CpuTierReference(layout);
    ASSERT_NE(ref, nullptr);
    auto nvme =
        NvmeOptimizerState::Create(layout, groups, Options(dir, buffers, true), nullptr, nullptr);
    ASSERT_THAT(nvme.status(), IsOk());
    NvmeOptimizerState& s = **nvme;
    std::mt19937_64 rng(TestSeed());
    ASSERT_THAT(SeedBoth(*ref, s, n, rng), IsOk());
    const int sgs = s.num_sub_groups();
    std::vector<int> order(static_cast<size_t>(sgs));
    for (int i = 0; i < sgs; ++i) order[static_cast<size_t>(i)] = i;
    const Hyperparams hp = TestHyperparams();
    auto step = [&](int t) {
      const std::vector<float> g = Normal(n, rng, 0.1f);
      std::memcpy(ref->grad(), g.data(), n * 4);
      std::memcpy(s.grad(), g.data(), n * 4);
      for (const SubGroup& sg : groups) {
        ASSERT_THAT(ref->StepSubGroup(sg, t, hp, 1.0f, nullptr, DType::kBFloat16), IsOk());
      }
      ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
      for (int i = 0; i < sgs; ++i) {
        const std::span<const int> rest(order.data() + i, order.size() - static_cast<size_t>(i));
        bool helps = false;
        ASSERT_THAT(s.ReadAhead(rest, &helps), IsOk());
        auto st = s.AcquireState(i, rest.first(std::min<size_t>(rest.size(), 2)), true);
        ASSERT_THAT(st.status(), IsOk());
        ASSERT_THAT(s.UpdateSubGroup(i, t, hp, 1.0f, st->params, st->exp_avg, st->exp_avg_sq,
                                     nullptr, DType::kBFloat16),
                    IsOk());
        ASSERT_THAT(s.WriteBack(i), IsOk());
      }
    };
    s.TakeAsyncStats();
    step(1);
    const NvmeOptimizerState::AsyncStats first = s.TakeAsyncStats();
    EXPECT_GT(first.bytes_hashed_at_update, 0u) << "a first update hashes for its write";
    EXPECT_EQ(first.bytes_hashed_at_write, 0u);
    step(2);
    const NvmeOptimizerState::AsyncStats second = s.TakeAsyncStats();
    if (buffers == 8) {
      EXPECT_EQ(second.bytes_written, 0u) << "every state stays in the buffers";
      EXPECT_EQ(second.bytes_hashed_at_update, 0u) << "no write came after the first updates";
      EXPECT_EQ(second.bytes_hashed_at_write, 0u);
      ASSERT_THAT(s.DrainAsync(), IsOk());
      const NvmeOptimizerState::AsyncStats drain = s.TakeAsyncStats();
      EXPECT_EQ(drain.bytes_written, first.bytes_hashed_at_update) << "every state written once";
      EXPECT_EQ(drain.bytes_hashed_at_write, drain.bytes_written) << "each write hashed itself";
    } else {
      EXPECT_EQ(second.bytes_hashed_at_update, first.bytes_hashed_at_update)
          << "every state was written between its updates";
      EXPECT_EQ(second.bytes_hashed_at_write, 0u);
      EXPECT_GT(second.bytes_written, 0u);
    }
    // Verified reads accept what was written, with the sums taken either way.
    EXPECT_EQ(StateDiffers(s, *ref, n), "");
    FlipByte(dir.File(kSwapFile), 100);  // sub-group 0's params
    std::vector<float> p(n), m(n), v(n);
    EXPECT_THAT(s.ReadState(0, n, p.data(), m.data(), v.data()),
                StatusIs(StatusCode::kDataLoss, HasSubstr("checksum mismatch")));
  }
}

// The squared norm in the order of Note [Squared-norm order], written out plainly: chunks of
// 4096 summed in double from first to last, the chunk sums added left to right.
double PlainSquaredNorm(const std::vector<float>& g) {
  double total = 0;
  for (size_t c = 0; c < g.size(); c += 4096) {
    double s = 0;
    for (size_t i = c; i < std::min(g.size(), c + 4096); ++i) s += double(g[i]) * double(g[i]);
    total += s;
  }
  return total;
}

// The overlapped worker's update with grad_checks takes the norm's chunk sums of its sub-group
// (in the fused tiles, or after the plain update without checksums), chunks across sub-group
// edges included; the step's GradSquaredNorm then sums only what is left and has the plain
// loop's bits, and the overflow check sees a NaN in any sub-group.
TEST(NvmeFusedNormTest, UpdatesTakeTheNormsChunkSumsWithThePlainLoopsBits) {
  for (const bool checksums : {true, false}) {
    ScratchDir dir;
    // Sub-groups start at multiples of 64, not of the norm's 4096-element chunk.
    const PartitionLayout layout = SixParameterLayout();
    const std::vector<SubGroup> groups = layout.SubGroups(250'000);
    ASSERT_GE(groups.size(), 3u);
    const size_t n = layout.partition_numel();
    auto nvme =
        NvmeOptimizerState::Create(layout, groups, Options(dir, 2, checksums), nullptr, nullptr);
    ASSERT_THAT(nvme.status(), IsOk());
    NvmeOptimizerState& s = **nvme;
    std::mt19937_64 rng(TestSeed() + (checksums ? 1 : 2));
    ASSERT_THAT(
        s.WriteState(0, Normal(n, rng, 1), Normal(n, rng, 0.1f), Normal(n, rng, 0.01f, true)),
        IsOk());
    ASSERT_THAT(s.Flush(), IsOk());
    const int sgs = s.num_sub_groups();
    for (int step = 1; step <= 2; ++step) {
      std::vector<float> g = Normal(n, rng, 0.1f);
      if (step == 2) g[groups[1].flat_begin + 5000] = std::nanf("");
      s.ZeroGrad();
      std::memcpy(s.grad(), g.data(), n * 4);
      ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
      for (int i = sgs - 1; i >= 0; --i) {  // backward's order: i, then i - 1, ...
        std::vector<int> wanted;
        for (int j = i; j >= 0; --j) wanted.push_back(j);
        bool helps = false;
        ASSERT_THAT(s.ReadAhead(wanted, &helps), IsOk());
        const std::span<const int> keep =
            std::span<const int>(wanted).first(std::min<size_t>(wanted.size(), 2));
        auto st = s.AcquireState(i, keep, true);
        ASSERT_THAT(st.status(), IsOk());
        ASSERT_THAT(s.UpdateSubGroup(i, step, TestHyperparams(), 1.0f, st->params, st->exp_avg,
                                     st->exp_avg_sq, nullptr, DType::kFloat32,
                                     /*grad_checks=*/true),
                    IsOk());
        ASSERT_THAT(s.WriteBack(i), IsOk());
      }
      if (step == 2) {
        EXPECT_TRUE(s.GradHasNonFinite(0, n));
        continue;
      }
      const double want = PlainSquaredNorm(g);
      // The sums were taken during the updates: a gradient changed now (inside a whole chunk of
      // sub-group 1) is not seen, which shows the step reuses them instead of summing again.
      s.grad()[groups[1].flat_begin + 8192 + 100] += 1000.0f;
      EXPECT_FALSE(s.GradHasNonFinite(0, n));
      const double got = s.GradSquaredNorm(0, n);
      EXPECT_EQ(0, std::memcmp(&got, &want, sizeof(double)))
          << "checksums " << checksums << ": " << got << " vs " << want;
      // GradSquaredNorm forgot them: asked again, it sums the gradients as they are now.
      std::vector<float> now(s.grad(), s.grad() + n);
      const double again = s.GradSquaredNorm(0, n), plain = PlainSquaredNorm(now);
      EXPECT_EQ(0, std::memcmp(&again, &plain, sizeof(double)));
    }
    ASSERT_THAT(s.DrainAsync(), IsOk());
  }
}

// One sub-group of 700,001 elements: parts of 2,801,664 bytes, so blocks 2 (params | exp_avg)
// and 5 (exp_avg | exp_avg_sq) straddle two parts.
class NvmeFusedCorruptionTest : public ::testing::Test {
 protected:
  static constexpr size_t kNumel = 700'001;
  void SetUp() override {
    const std::vector<size_t> numels = {kNumel};
    layout_ = PartitionLayout::Create(numels, 1, 0, 1).value();
    groups_ = layout_.SubGroups(0);
    ASSERT_EQ(groups_.size(), 1u);
    auto s = NvmeOptimizerState::Create(layout_, groups_, Options(dir_, 2, true), nullptr, nullptr);
    ASSERT_THAT(s.status(), IsOk());
    nvme_ = std::move(s).value();
    std::mt19937_64 rng(TestSeed());
    p_ = Normal(kNumel, rng, 1);
    m_ = Normal(kNumel, rng, 0.1f);
    v_ = Normal(kNumel, rng, 0.01f, true);
    const std::vector<float> g = Normal(kNumel, rng, 0.1f);
    std::memcpy(nvme_->grad(), g.data(), kNumel * 4);
    ASSERT_THAT(nvme_->WriteState(0, p_, m_, v_), IsOk());
    ASSERT_THAT(nvme_->Flush(), IsOk());
  }
  // The state on NVMe is still the one written in SetUp.
  void ExpectUnchanged() {
    std::vector<float> p(kNumel), m(kNumel), v(kNumel);
    ASSERT_THAT(nvme_->ReadSubGroup(0, p.data(), m.data(), v.data()), IsOk());
    EXPECT_EQ(p, p_);
    EXPECT_EQ(m, m_);
    EXPECT_EQ(v, v_);
  }
  ScratchDir dir_;
  PartitionLayout layout_;
  std::vector<SubGroup> groups_;
  std::unique_ptr<NvmeOptimizerState> nvme_;
  std::vector<float> p_, m_, v_;
};

TEST_F(NvmeFusedCorruptionTest, EachPartAndStraddlingBlocksAreDataLossBeforeAnyWrite) {
  const std::string file = dir_.File(kSwapFile);
  struct Case {
    const char* where;
    off_t offset;         // of the flipped byte in the file (the sub-group's extent is at 0)
    size_t block_offset;  // of its block in the tensor
  };
  const Case cases[] = {
      {"params", 100, 0},
      {"exp_avg", 3'500'000, 3 << 20},
      {"exp_avg_sq", 7'000'000, 6 << 20},
      {"exp_avg side of the params | exp_avg block", 2'900'000, 2 << 20},
      {"params side of the params | exp_avg block", 2'500'000, 2 << 20},
      {"exp_avg side of the exp_avg | exp_avg_sq block", 5'300'000, 5 << 20},
  };
  const Hyperparams hp = TestHyperparams();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.where);
    FlipByte(file, c.offset);
    ASSERT_THAT(nvme_->PrepareSubGroupSteps(), IsOk());
    auto st = nvme_->AcquireState(0, {}, true);  // the read's checksums are the update's
    ASSERT_THAT(st.status(), IsOk());
    EXPECT_THAT(nvme_->UpdateSubGroup(0, 1, hp, 1.0f, st->params, st->exp_avg, st->exp_avg_sq,
                                      nullptr, DType::kBFloat16),
                StatusIs(StatusCode::kDataLoss,
                         AllOf(HasSubstr("read sub-group 0"), HasSubstr("checksum mismatch"),
                               HasSubstr("tensor offset " + std::to_string(c.block_offset)),
                               HasSubstr(file + " @ " + std::to_string(c.block_offset)))));
    EXPECT_FALSE(nvme_->async_busy()) << "the part-updated slot must be dropped";
    EXPECT_THAT(nvme_->WriteBack(0),
                StatusIs(StatusCode::kFailedPrecondition, HasSubstr("without its state acquired")));
    FlipByte(file, c.offset);  // repaired: nothing was written over it
    ExpectUnchanged();
  }
}

TEST_F(NvmeFusedCorruptionTest, StepExceptFailsTheStepAndWritesNothing) {
  const std::string file = dir_.File(kSwapFile);
  FlipByte(file, 5'000'000);
  bool helps = false;
  const int order[] = {0};
  ASSERT_THAT(nvme_->ReadAhead(order, &helps), IsOk());
  EXPECT_THAT(nvme_->StepExcept(1, TestHyperparams(), 1.0f, nullptr, DType::kBFloat16, {0}),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("offload_optimizer nvme step 1"),
                             HasSubstr("read sub-group 0"), HasSubstr("tensor offset 4194304"))));
  FlipByte(file, 5'000'000);
  ExpectUnchanged();
}

TEST_F(NvmeFusedCorruptionTest, WriteBackWithoutTheUpdateVerifiesTheReadFirst) {
  const std::string file = dir_.File(kSwapFile);
  FlipByte(file, 8'000'000);
  ASSERT_THAT(nvme_->PrepareSubGroupSteps(), IsOk());
  ASSERT_THAT(nvme_->AcquireState(0, {}, true).status(), IsOk());
  EXPECT_THAT(nvme_->WriteBack(0),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("read sub-group 0"), HasSubstr("tensor offset 7340032"))));
  FlipByte(file, 8'000'000);
  ExpectUnchanged();
  // Overwritten whole (need_contents false), a slot needs no verification.
  FlipByte(file, 8'000'000);
  auto st = nvme_->AcquireState(0, {}, false);
  ASSERT_THAT(st.status(), IsOk());
  std::memcpy(st->params, p_.data(), kNumel * 4);
  std::memcpy(st->exp_avg, m_.data(), kNumel * 4);
  std::memcpy(st->exp_avg_sq, v_.data(), kNumel * 4);
  ASSERT_THAT(nvme_->WriteBack(0), IsOk());
  ASSERT_THAT(nvme_->DrainAsync(), IsOk());
  ExpectUnchanged();
}

}  // namespace
}  // namespace strata
