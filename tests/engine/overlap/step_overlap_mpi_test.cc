// strata.overlap_step on two ranks (step_overlap_mpi_world2): the overlapped step equals the
// serial one bitwise at stages 2 and 3, optimizer on cpu and nvme, with a clip that triggers (the
// global norm is all-reduced before the early updates are kept or redone) and without clipping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/llama/model/llama_model.h"
#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/inf_injector.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::OverlapCase;
using testing::OverlapRun;
using testing::OverlapRunOptions;

// Steps 1 and 3 (of 0..3) overflow: `inject` on the LM head, armed before those steps.
void OverflowAtOddSteps(testing::InfInjector* inject, OverlapRunOptions* o) {
  o->hooks = inject;
  o->hook_module = [](llama::LlamaForCausalLM& m) -> nn::Module* { return &m.lm_head(); };
  o->arg = inject;
  o->before_step = [](int step, void* arg) {
    static_cast<testing::InfInjector*>(arg)->armed = step % 2 == 1;
  };
}

TEST(StepOverlapMpiTest, OverlappedStepEqualsTheSerialStepBitwiseOnEveryRank) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const OverlapCase cases[] = {
      {2, "cpu", "none", DType::kBFloat16, 0, false, 2},
      {2, "nvme", "none", DType::kFloat32, 1e-4, true, 2},
      {3, "cpu", "cpu", DType::kFloat16, 1e-4, true, 2},
      {3, "nvme", "none", DType::kBFloat16, 1e4, false, 2},
  };
  testing::ScratchDir dir;  // per rank
  for (const OverlapCase& c : cases) {
    OverlapRunOptions o;
    o.nvme_dir = dir.File("serial");
    const OverlapRun serial = testing::RunOverlapCase(comm, c, false, o);
    o.nvme_dir = dir.File("overlap");
    const OverlapRun overlapped = testing::RunOverlapCase(comm, c, true, o);
    const std::string name = testing::OverlapCaseName(c) + " rank " + std::to_string(comm.rank());
    EXPECT_GT(overlapped.overlapped, 0) << name;
    EXPECT_TRUE(testing::SameBits(serial.masters, overlapped.masters)) << name;
    EXPECT_TRUE(testing::SameBits({serial.losses}, {overlapped.losses})) << name;
  }
}

// strata.deferred_updates on two ranks: each rank's sub-groups left after the backward are
// updated during its next forward (the masters gathered only after the last step, so every
// forward runs with updates pending) and equal the serial step bitwise on every rank: shards and
// optimizer on nvme with a clip that triggers (everything deferred after the first step), both on
// cpu in fp16 with an overflow on rank 0 only at steps 1 and 3 (the skip is agreed by all-reduce:
// nothing is deferred on either rank for those steps).
TEST(StepOverlapMpiTest, DeferredUpdatesEqualTheSerialStepBitwiseOnEveryRank) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const OverlapCase cases[] = {
      {3, "nvme", "nvme", DType::kBFloat16, 1e-4, true, 2},
      {3, "cpu", "cpu", DType::kFloat16, 0, false, 2},
  };
  testing::ScratchDir dir;  // per rank
  for (const OverlapCase& c : cases) {
    const bool fp16 = c.dtype == DType::kFloat16;
    testing::InfInjector inject(nullptr);
    OverlapRunOptions o;
    o.steps = 4;
    o.gather_each_step = false;
    if (fp16 && comm.rank() == 0) OverflowAtOddSteps(&inject, &o);
    o.nvme_dir = dir.File("serial");
    const OverlapRun serial = testing::RunOverlapCase(comm, c, false, o);
    o.nvme_dir = dir.File("deferred");
    const OverlapRun deferred = testing::RunOverlapCase(comm, c, true, o);
    const std::string name = testing::OverlapCaseName(c) + " rank " + std::to_string(comm.rank());
    EXPECT_EQ(serial.skipped, fp16 ? 2 : 0) << name;
    EXPECT_EQ(deferred.skipped, serial.skipped) << name;
    if (!fp16) {
      EXPECT_GE(deferred.deferred, 2 * serial.sub_groups) << name;
    }
    EXPECT_TRUE(testing::SameBits(serial.masters, deferred.masters)) << name;
    EXPECT_TRUE(testing::SameBits({serial.losses}, {deferred.losses})) << name;
  }
}

// Swap chunks (strata.swap_chunk_bytes) on two ranks: the optimizer on NVMe with each rank's
// sub-groups (sub_group_size 3000) cut into 1024-element chunks equals the optimizer in CPU memory
// bitwise at stage 3 (fp32, bf16 with a clip that triggers, fp16 with overflow on rank 0 only:
// the skip is agreed by all-reduce), overlapped.
TEST(StepOverlapMpiTest, ChunkedNvmeEqualsTheCpuPlacementBitwiseOnEveryRank) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  constexpr uint64_t kChunk = 12 * 1024;
  const OverlapCase cases[] = {
      {3, "nvme", "none", DType::kFloat32, 0, false, 2, kChunk},
      {3, "nvme", "none", DType::kBFloat16, 1e-4, true, 2, kChunk},
      {3, "nvme", "none", DType::kFloat16, 1e-4, false, 2, kChunk},
  };
  testing::ScratchDir dir;  // per rank
  for (const OverlapCase& c : cases) {
    OverlapCase cpu = c;
    cpu.opt = "cpu";
    cpu.chunk_bytes = 0;
    const bool fp16 = c.dtype == DType::kFloat16;
    testing::InfInjector inject(nullptr);
    OverlapRunOptions o;
    o.steps = 4;
    if (fp16 && comm.rank() == 0) OverflowAtOddSteps(&inject, &o);
    o.nvme_dir = dir.File("cpu");
    const OverlapRun ref = testing::RunOverlapCase(comm, cpu, false, o);
    EXPECT_EQ(ref.skipped, fp16 ? 2 : 0);
    o.nvme_dir = dir.File("chunks");
    const OverlapRun got = testing::RunOverlapCase(comm, c, true, o);
    const std::string name = testing::OverlapCaseName(c) + " rank " + std::to_string(comm.rank());
    EXPECT_TRUE(testing::SameBits(ref.masters, got.masters)) << name;
    EXPECT_TRUE(testing::SameBits({ref.losses}, {got.losses})) << name;
    EXPECT_EQ(ref.skipped, got.skipped) << name;
  }
}

}  // namespace
}  // namespace strata
