// The overlapped step (engine/overlap/step_overlap.h) as the TSan tree runs it: its worker thread,
// the copy stream's host functions, the reducer's callbacks and (overlap_comm) the comm stream all
// touch the optimizer state while backward runs. A few steps of the tiny model per placement,
// overlapped against serial, bitwise; and a speculative step (a clip that triggers) whose early
// updates are rolled back and redone. The full matrix (dtypes, fp16 overflow) is
// tests/engine/overlap/step_overlap_test.cc; this suite is kept to seconds under TSan.
#include <gtest/gtest.h>

#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::OverlapCase;
using testing::OverlapRun;
using testing::OverlapRunOptions;

// Runs `c` serial and overlapped; returns the serial run.
OverlapRun ExpectOverlapEqualsSerial(const OverlapCase& c, int steps) {
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  OverlapRunOptions o;
  o.steps = steps;
  o.nvme_dir = dir.File("serial");
  const OverlapRun serial = testing::RunOverlapCase(*comm, c, false, o);
  o.nvme_dir = dir.File("overlap");
  const OverlapRun overlapped = testing::RunOverlapCase(*comm, c, true, o);
  EXPECT_GE(serial.sub_groups, 4);
  EXPECT_EQ(serial.overlapped, 0);
  EXPECT_GT(overlapped.overlapped, 0) << "no sub-group was updated during backward";
  EXPECT_TRUE(testing::SameBits(serial.masters, overlapped.masters));
  EXPECT_EQ(serial.losses.size(), overlapped.losses.size());
  EXPECT_TRUE(testing::SameBits({serial.losses}, {overlapped.losses}));
  EXPECT_EQ(serial.skipped, overlapped.skipped);
  return serial;
}

class StepOverlapTsanTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(StepOverlapTsanTest, OverlappedStepsEqualSerialSteps) {
  ExpectOverlapEqualsSerial(GetParam(), /*steps=*/2);
}

// stage x optimizer, with overlap_comm on half of them (the reduce-scatter on the comm stream
// while the worker updates) and bf16 on stage 3 (a compute-dtype copy written by the worker).
INSTANTIATE_TEST_SUITE_P(
    Placements, StepOverlapTsanTest,
    ::testing::Values(OverlapCase{2, "cpu", "none", DType::kFloat32, 0, false, 2},
                      OverlapCase{2, "nvme", "none", DType::kFloat32, 0, true, 2},
                      OverlapCase{3, "cpu", "cpu", DType::kBFloat16, 0, true, 2},
                      OverlapCase{3, "nvme", "none", DType::kBFloat16, 0, false, 2}),
    [](const auto& info) { return testing::OverlapCaseName(info.param); });

// gradient_clipping far below the tiny model's norm: every step is speculative and clipping
// triggers, so the early updates are restored from the kept copies and redone by the serial
// step. One step: after a rollback the next speculative steps run serially for a while.
TEST(StepOverlapTsanRollbackTest, SpeculativeStepThatClipsIsRolledBackExactly) {
  for (const char* opt : {"cpu", "nvme"}) {
    SCOPED_TRACE(opt);
    OverlapCase c{3, opt, "none", DType::kFloat32, /*clip=*/1e-4, true, 2};
    const OverlapRun serial = ExpectOverlapEqualsSerial(c, /*steps=*/1);
    ASSERT_EQ(serial.norms.size(), 1u);
    EXPECT_GT(serial.norms[0], c.clip) << "the clip did not trigger: nothing was rolled back";
  }
}

// strata.deferred_updates: a clip that triggers leaves every update after the first step to the
// next forward, where the worker updates the shards (in place on the cpu tier, through its copy
// buffers into the NVMe store) while the hooks gather them; three steps, the masters gathered
// only at the end so each forward runs with updates pending.
TEST(StepOverlapTsanDeferredTest, DeferredUpdatesDuringTheForwardEqualSerialSteps) {
  for (const char* placement : {"cpu", "nvme"}) {
    SCOPED_TRACE(placement);
    OverlapCase c{3, placement, placement, DType::kBFloat16, /*clip=*/1e-4, false, 2};
    testing::ScratchDir dir;
    auto comm = testing::MakeLocalComm();
    OverlapRunOptions o;
    o.steps = 3;
    o.gather_each_step = false;
    o.nvme_dir = dir.File("serial");
    const OverlapRun serial = testing::RunOverlapCase(*comm, c, false, o);
    o.nvme_dir = dir.File("deferred");
    const OverlapRun deferred = testing::RunOverlapCase(*comm, c, true, o);
    EXPECT_GE(deferred.deferred, 2 * serial.sub_groups);
    EXPECT_TRUE(testing::SameBits(serial.masters, deferred.masters));
    EXPECT_TRUE(testing::SameBits({serial.losses}, {deferred.losses}));
  }
}

}  // namespace
}  // namespace strata
