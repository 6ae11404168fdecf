// Faults on NvmeOptimizerState's swap path: EIO and ENOSPC fail the step naming the swap file and
// offset; short reads are resumed and change nothing; a block corrupted on disk is DataLoss by its
// checksum, named by file and offset.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/optimizer_state.h"
#include "tests/aio/faulty_engine.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::FaultPlan;
using ::strata::testing::FaultyEngine;
using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kSwapFile[] = "strata-optimizer-rank0.swap";

struct Rig {
  PartitionLayout layout;
  std::vector<SubGroup> groups;
  std::unique_ptr<NvmeOptimizerState> nvme;
};

// A partition of four sub-groups on `dir`, initialised with random master weights and gradients
// (seeded), its aio engine wrapped in a FaultyEngine following `plan` (armed by the caller).
Rig MakeRig(const ScratchDir& dir, const FaultPlan& plan, bool pipelined, uint64_t seed) {
  Rig r;
  const std::vector<size_t> numels = {70'000, 70'000, 70'000, 70'001};
  r.layout = PartitionLayout::Create(numels, 1, 0, 64).value();
  r.groups = r.layout.SubGroups(60'000);
  NvmeOptimizerStateOptions o;
  o.hyperparams = DefaultHyperparams(OptimizerKind::kAdam);
  o.nvme_paths = {dir.path().string()};
  o.pin_memory = false;
  o.pipeline_read = o.pipeline_write = pipelined;
  o.aio.block_size = 64 << 10;
  o.aio.engine_factory = [plan](int,
                                const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new FaultyEngine(std::move(real), plan));
  };
  r.nvme = std::move(NvmeOptimizerState::Create(r.layout, r.groups, o, nullptr, nullptr)).value();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  const size_t n = r.layout.partition_numel();
  std::vector<float> master(n);
  for (size_t i = 0; i < n; ++i) master[i] = d(rng), r.nvme->grad()[i] = 0.01f * d(rng);
  EXPECT_THAT(r.nvme->WriteMaster(0, master), IsOk());
  return r;
}

Status StepOnce(Rig& r, int64_t step) {
  return r.nvme->Step(step, DefaultHyperparams(OptimizerKind::kAdam), 1.0f, nullptr,
                      DType::kBFloat16);
}

FaultPlan Armed(FaultPlan p) {
  p.armed = std::make_shared<std::atomic<bool>>(false);
  return p;
}

TEST(NvmeOptimizerFaultTest, ReadErrorFailsTheStepNamingFileAndOffset) {
  ScratchDir dir;
  FaultPlan plan = Armed({});
  plan.eio_every = 3;
  plan.only_reads = true;
  Rig r = MakeRig(dir, plan, /*pipelined=*/true, TestSeed());
  plan.armed->store(true);
  Status s = StepOnce(r, 1);
  plan.armed->store(false);
  EXPECT_THAT(
      s, StatusIs(StatusCode::kIoError,
                  AllOf(HasSubstr("offload_optimizer nvme step 1"), HasSubstr("read sub-group"),
                        HasSubstr(kSwapFile), HasSubstr(" @ "), HasSubstr("Input/output error"))));
  EXPECT_EQ(s.sys_errno(), EIO);
}

TEST(NvmeOptimizerFaultTest, FullDiskOnWriteFailsTheStepNamingFileAndOffset) {
  ScratchDir dir;
  FaultPlan plan = Armed({});
  plan.enospc_every = 2;
  plan.only_writes = true;
  Rig r = MakeRig(dir, plan, /*pipelined=*/false, TestSeed());
  ASSERT_THAT(r.nvme->Flush(), IsOk());  // the initial state is on disk before faults start
  plan.armed->store(true);
  Status s = StepOnce(r, 1);
  plan.armed->store(false);
  EXPECT_THAT(s,
              StatusIs(StatusCode::kIoError,
                       AllOf(HasSubstr("write sub-group"), HasSubstr(kSwapFile), HasSubstr(" @ "),
                             HasSubstr("No space left on device"), HasSubstr("torn"))));
  EXPECT_EQ(s.sys_errno(), ENOSPC);
}

TEST(NvmeOptimizerFaultTest, ShortReadsAreResumedAndChangeNothing) {
  const uint64_t seed = TestSeed();
  ScratchDir clean_dir, faulty_dir;
  Rig clean = MakeRig(clean_dir, {}, true, seed);
  FaultPlan plan = Armed({});
  plan.short_every = 1;
  plan.only_reads = true;
  Rig faulty = MakeRig(faulty_dir, plan, true, seed);
  const size_t n = clean.layout.partition_numel();
  for (int step = 1; step <= 2; ++step) {
    ASSERT_THAT(StepOnce(clean, step), IsOk());
    plan.armed->store(true);
    ASSERT_THAT(StepOnce(faulty, step), IsOk());
    plan.armed->store(false);
  }
  std::vector<float> a(n), b(n), am(n), bm(n);
  ASSERT_THAT(clean.nvme->ReadState(0, n, a.data(), am.data(), nullptr), IsOk());
  ASSERT_THAT(faulty.nvme->ReadState(0, n, b.data(), bm.data(), nullptr), IsOk());
  EXPECT_EQ(a, b);
  EXPECT_EQ(am, bm);
}

TEST(NvmeOptimizerFaultTest, CorruptedSwapBlockIsDataLossNamingFileAndOffset) {
  ScratchDir dir;
  Rig r = MakeRig(dir, {}, true, TestSeed());
  ASSERT_THAT(StepOnce(r, 1), IsOk());
  // Flip bytes inside the first extent on disk (behind the swap layer's back).
  const std::string path = dir.File(kSwapFile);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t bytes[16];
  ASSERT_EQ(::pread(fd, bytes, sizeof(bytes), 8192), 16);
  for (uint8_t& b : bytes) b ^= 0x5A;
  ASSERT_EQ(::pwrite(fd, bytes, sizeof(bytes), 8192), 16);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
  EXPECT_THAT(StepOnce(r, 2), StatusIs(StatusCode::kDataLoss,
                                       AllOf(HasSubstr("checksum mismatch"), HasSubstr(kSwapFile),
                                             HasSubstr(" @ "), HasSubstr("sub-group 0"))));
  std::vector<float> p(r.groups[0].flat_end);
  EXPECT_THAT(r.nvme->ReadSubGroup(0, p.data(), nullptr, nullptr),
              StatusIs(StatusCode::kDataLoss, HasSubstr("checksum mismatch")));
}

}  // namespace
}  // namespace strata
