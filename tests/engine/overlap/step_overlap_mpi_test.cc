// strata.overlap_step on two ranks (step_overlap_mpi_world2): the overlapped step equals the
// serial one bitwise at stages 2 and 3, optimizer on cpu and nvme, with a clip that triggers (the
// global norm is all-reduced before the early updates are kept or redone) and without clipping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::OverlapCase;
using testing::OverlapRun;
using testing::OverlapRunOptions;

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

}  // namespace
}  // namespace strata
