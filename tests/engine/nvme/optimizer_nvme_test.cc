// NvmeOptimizerState against OptimizerState on Tier::kCpu ("same math, any placement"): the same
// partition, sub-groups and hyperparameters give bitwise the same master, moments and
// compute-dtype copy-out, whatever the pipelining; and the swap path's failures name their file.
#include "engine/nvme/optimizer_nvme.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/base/trace.h"
#include "engine/optim/optimizer_state.h"
#include "tests/aio/faulty_engine.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Mode {
  IoEngineKind engine;
  bool pipeline_read, pipeline_write;
  size_t buffers;
  DType copy_dtype;
};

void PrintTo(const Mode& m, std::ostream* os) {
  *os << IoEngineKindName(m.engine) << " read " << m.pipeline_read << " write " << m.pipeline_write
      << " buffers " << m.buffers << " " << DTypeName(m.copy_dtype);
}

std::string ModeName(const ::testing::TestParamInfo<Mode>& i) {
  const Mode& m = i.param;
  return std::string(IoEngineKindName(m.engine)) + (m.pipeline_read ? "_pread" : "") +
         (m.pipeline_write ? "_pwrite" : "") + "_b" + std::to_string(m.buffers) + "_" +
         std::string(DTypeName(m.copy_dtype));
}

// Parameters of mixed sizes, partitioned for rank 1 of 2 (padding and alignment gaps included),
// cut into several sub-groups.
PartitionLayout MakeLayout() {
  const std::vector<size_t> numels = {1000, 300'001, 77'777, 65'536, 17, 200'000, 4097};
  return PartitionLayout::Create(numels, 2, 1, 64).value();
}

Hyperparams TestHyperparams() {
  Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
  hp.lr = 1e-2f;
  hp.weight_decay = 0.01f;
  return hp;
}

// The valid elements of each slot get N(0, scale) values; padding stays zero.
void FillValid(const PartitionLayout& l, float* out, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  for (const ShardSlice& s : l.slices()) {
    for (size_t i = 0; i < s.valid_numel; ++i) out[s.flat_offset + i] = d(rng);
  }
}

NvmeOptimizerStateOptions NvmeOptions(const ScratchDir& dir, IoEngineKind engine) {
  NvmeOptimizerStateOptions o;
  o.hyperparams = TestHyperparams();
  o.nvme_paths = {dir.path().string()};
  o.pin_memory = false;
  o.aio.engine = engine;
  o.aio.block_size = 256 << 10;
  return o;
}

class NvmeOptimizerStateTest : public ::testing::TestWithParam<Mode> {};

TEST_P(NvmeOptimizerStateTest, StepsEqualCpuOptimizerStateBitwise) {
  const Mode mode = GetParam();
  STRATA_AIO_OR_SKIP(mode.engine);
  ScratchDir dir;
  const PartitionLayout layout = MakeLayout();
  const std::vector<SubGroup> groups = layout.SubGroups(150'000);
  ASSERT_GE(groups.size(), 3u);
  const size_t n = layout.partition_numel();

  OptimizerStateOptions ro;
  ro.hyperparams = TestHyperparams();
  ro.tier = Tier::kCpu;
  ro.pin_memory = false;
  auto ref = OptimizerState::Create(layout, ro, nullptr, nullptr);
  ASSERT_THAT(ref.status(), IsOk());
  NvmeOptimizerStateOptions no = NvmeOptions(dir, mode.engine);
  if (mode.engine == IoEngineKind::kLibaio) {  // two swap directories (files used in turn)
    std::filesystem::create_directories(dir.path() / "a");
    std::filesystem::create_directories(dir.path() / "b");
    no.nvme_paths = {(dir.path() / "a").string(), (dir.path() / "b").string()};
  }
  no.pipeline_read = mode.pipeline_read;
  no.pipeline_write = mode.pipeline_write;
  no.buffer_count = mode.buffers;
  auto nvme = NvmeOptimizerState::Create(layout, groups, no, nullptr, nullptr);
  ASSERT_THAT(nvme.status(), IsOk());
  ASSERT_EQ((*nvme)->numel(), n);

  // Initialise as the engine does: one WriteMaster per parameter slot.
  std::mt19937_64 rng(TestSeed());
  FillValid(layout, (*ref)->master(), rng, 1.0f);
  for (const ShardSlice& s : layout.slices()) {
    ASSERT_THAT(
        (*nvme)->WriteMaster(
            s.flat_offset, std::span<const float>((*ref)->master() + s.flat_offset, s.valid_numel)),
        IsOk());
  }

  const size_t cbytes = DTypeBytes(mode.copy_dtype);
  std::vector<uint8_t> copy_ref(n * cbytes, 0xAB), copy_nvme(n * cbytes, 0xCD);
  for (int step = 1; step <= 3; ++step) {
    FillValid(layout, (*ref)->grad(), rng, 0.1f);
    std::memcpy((*nvme)->grad(), (*ref)->grad(), n * sizeof(float));
    ASSERT_EQ((*nvme)->GradSquaredNorm(0, n), (*ref)->GradSquaredNorm(0, n));
    ASSERT_FALSE((*nvme)->GradHasNonFinite(0, n));
    Hyperparams hp = TestHyperparams();
    hp.lr *= 1.0f / static_cast<float>(step);  // a schedule: each step's hp must be used
    const float grad_scale = 0.5f + 0.25f * static_cast<float>(step);
    for (const SubGroup& g : groups) {
      ASSERT_THAT((*ref)->StepSubGroup(g, step, hp, grad_scale, copy_ref.data(), mode.copy_dtype),
                  IsOk());
    }
    ASSERT_THAT((*nvme)->Step(step, hp, grad_scale, copy_nvme.data(), mode.copy_dtype), IsOk());
    ASSERT_EQ(0, std::memcmp(copy_ref.data(), copy_nvme.data(), copy_ref.size()))
        << "compute-dtype copy-out differs at step " << step;
    (*ref)->ZeroGrad();
    (*nvme)->ZeroGrad();
  }
  const OptimizerStepStats& st = (*nvme)->last_step();
  EXPECT_GT(st.bytes_read, 3 * n * sizeof(float) - 1);
  EXPECT_EQ(st.bytes_read, st.bytes_written);
  StepBreakdown b;
  (*nvme)->AddTo(&b);
  EXPECT_EQ(b.nvme_read_bytes, st.bytes_read);
  EXPECT_EQ(b.nvme_write_bytes, st.bytes_written);

  std::vector<float> p(n), m(n), v(n);
  ASSERT_THAT((*nvme)->ReadState(0, n, p.data(), m.data(), v.data()), IsOk());
  EXPECT_EQ(0, std::memcmp(p.data(), (*ref)->master(), n * 4)) << "master";
  EXPECT_EQ(0, std::memcmp(m.data(), (*ref)->exp_avg(), n * 4)) << "exp_avg";
  EXPECT_EQ(0, std::memcmp(v.data(), (*ref)->exp_avg_sq(), n * 4)) << "exp_avg_sq";
  // Whole sub-groups too (the checkpoint path), straight from NVMe.
  for (int i = 0; i < (*nvme)->num_sub_groups(); ++i) {
    const SubGroup& g = (*nvme)->sub_group(i);
    std::vector<float> gp(g.flat_end - g.flat_begin), gv(gp.size());
    ASSERT_THAT((*nvme)->ReadSubGroup(i, gp.data(), nullptr, gv.data()), IsOk());
    EXPECT_EQ(0, std::memcmp(gp.data(), (*ref)->master() + g.flat_begin, gp.size() * 4));
    EXPECT_EQ(0, std::memcmp(gv.data(), (*ref)->exp_avg_sq() + g.flat_begin, gv.size() * 4));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, NvmeOptimizerStateTest,
    ::testing::Values(Mode{IoEngineKind::kIoUring, false, false, 1, DType::kBFloat16},
                      Mode{IoEngineKind::kIoUring, true, true, 4, DType::kBFloat16},
                      Mode{IoEngineKind::kIoUring, true, false, 3, DType::kFloat16},
                      Mode{IoEngineKind::kLibaio, false, true, 2, DType::kFloat32},
                      Mode{IoEngineKind::kLibaio, true, true, 5, DType::kFloat16}),
    ModeName);

TEST(NvmeOptimizerStateIoTest, WriteStateRoundTripsAcrossSubGroupsWithMoments) {
  ScratchDir dir;
  const PartitionLayout layout = MakeLayout();
  const std::vector<SubGroup> groups = layout.SubGroups(100'000);
  const size_t n = layout.partition_numel();
  auto s = NvmeOptimizerState::Create(layout, groups, NvmeOptions(dir, IoEngineKind::kAuto),
                                      nullptr, nullptr);
  ASSERT_THAT(s.status(), IsOk());
  std::mt19937_64 rng(TestSeed());
  std::normal_distribution<float> d;
  std::vector<float> p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) p[i] = d(rng), m[i] = d(rng), v[i] = std::abs(d(rng));
  // Uneven chunks that cross sub-group boundaries, out of order (a restore in any order).
  const size_t cut = n / 3 + 11;
  ASSERT_THAT((*s)->WriteState(cut, std::span(p).subspan(cut), std::span(m).subspan(cut),
                               std::span(v).subspan(cut)),
              IsOk());
  ASSERT_THAT((*s)->WriteState(0, std::span(p).first(cut), std::span(m).first(cut),
                               std::span(v).first(cut)),
              IsOk());
  ASSERT_THAT((*s)->Flush(), IsOk());
  std::vector<float> bp(n), bm(n), bv(n);
  ASSERT_THAT((*s)->ReadState(0, n, bp.data(), bm.data(), bv.data()), IsOk());
  EXPECT_EQ(bp, p);
  EXPECT_EQ(bm, m);
  EXPECT_EQ(bv, v);
  // A master-only write keeps the moments.
  std::vector<float> p2(1000, 3.0f);
  ASSERT_THAT((*s)->WriteMaster(cut - 500, p2), IsOk());
  ASSERT_THAT((*s)->ReadState(cut - 500, 1000, bp.data(), bm.data(), nullptr), IsOk());
  EXPECT_EQ(std::vector<float>(bp.begin(), bp.begin() + 1000), p2);
  EXPECT_EQ(0, std::memcmp(bm.data(), m.data() + cut - 500, 1000 * 4));
  EXPECT_THAT((*s)->WriteMaster(n - 5, std::vector<float>(6)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("outside the partition")));
  EXPECT_THAT((*s)->ReadSubGroup(99, nullptr, nullptr, nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no sub-group 99")));
}

TEST(NvmeOptimizerStateIoTest, StepRecordsItsSpansOnTheTracer) {
  ScratchDir dir;
  const PartitionLayout layout = MakeLayout();
  const std::vector<SubGroup> groups = layout.SubGroups(100'000);
  auto s = NvmeOptimizerState::Create(layout, groups, NvmeOptions(dir, IoEngineKind::kAuto),
                                      nullptr, nullptr);
  ASSERT_THAT(s.status(), IsOk());
  Tracer tracer(dir.File("trace.json"));
  (*s)->set_tracer(&tracer);
  ASSERT_THAT((*s)->Step(1, TestHyperparams(), 1.0f, nullptr, DType::kBFloat16), IsOk());
  // One span for the step and one per sub-group.
  EXPECT_EQ(tracer.event_count(), groups.size() + 1);
  ASSERT_THAT(tracer.Flush(), IsOk());
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "trace.json"));
}

TEST(NvmeOptimizerStateIoTest, RejectsSubGroupsThatDoNotCoverThePartition) {
  ScratchDir dir;
  const PartitionLayout layout = MakeLayout();
  std::vector<SubGroup> groups = layout.SubGroups(100'000);
  groups.pop_back();
  EXPECT_THAT(NvmeOptimizerState::Create(layout, groups, NvmeOptions(dir, IoEngineKind::kAuto),
                                         nullptr, nullptr)
                  .status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("cover")));
}

TEST(NvmeOptimizerStateConfigTest, MakesARelativeNvmePathUnderTheWorkingDirectory) {
  ScratchDir dir;
  const auto old_cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  Config c;
  c.zero.offload_optimizer.device = OffloadDevice::kNvme;
  c.zero.offload_optimizer.nvme_paths = {"swap/a", "swap/b"};
  c.zero.offload_optimizer.pipeline_read = true;
  c.zero.offload_optimizer.buffer_count = 6;
  c.strata.swap_checksums = false;
  auto o = NvmeOptimizerStateOptionsFromConfig(c, 3);
  std::filesystem::current_path(old_cwd);
  ASSERT_THAT(o.status(), IsOk());
  ASSERT_EQ(o->nvme_paths.size(), 2u);
  EXPECT_EQ(o->nvme_paths[0], (dir.path() / "swap/a").string());
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "swap/a"));
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "swap/b"));
  EXPECT_TRUE(o->pipeline_read);
  EXPECT_FALSE(o->pipeline_write);
  EXPECT_EQ(o->buffer_count, 6u);
  EXPECT_FALSE(o->checksums);
  EXPECT_EQ(o->rank, 3);

  c.zero.offload_optimizer.nvme_paths.clear();
  EXPECT_THAT(NvmeOptimizerStateOptionsFromConfig(c, 0).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("zero_optimization.offload_optimizer.nvme_path")));
}

}  // namespace
}  // namespace strata
