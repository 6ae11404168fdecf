// ParamCoordinator under mpirun (world 2): the module order of the first step is checked across
// ranks, and prefetching changes no bits with gathers that are real all-gathers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/coordinator/flag_lm.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::PrefetchOutcome;
using ::strata::testing::PrefetchRun;
using ::strata::testing::SameBits;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParamCoordinatorMpiTest, PrefetchOnEqualsOffBitwise) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const testing::TokenData data = testing::RandomTokens(21, 8, 2, 16, 256);
  for (const char* param : {"none", "cpu"}) {
    for (bool checkpointing : {false, true}) {
      PrefetchRun off{.param = param, .tied = true, .checkpointing = checkpointing};
      const PrefetchOutcome base = testing::TrainPrefetch(comm, off, data);
      ASSERT_THAT(base.status, IsOk());
      PrefetchRun on = off;
      on.bucket = 60000;
      on.max_live = 150000;
      const PrefetchOutcome got = testing::TrainPrefetch(comm, on, data);
      ASSERT_THAT(got.status, IsOk()) << testing::Describe(on);
      EXPECT_TRUE(SameBits(base.masters, got.masters)) << testing::Describe(on);
      EXPECT_GT(got.stats.prefetch_hits, 0u) << testing::Describe(on);
    }
  }
}

TEST(ParamCoordinatorMpiTest, DifferentModuleOrderNamesTheRank) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const testing::TokenData data = testing::RandomTokens(23, 4, 2, 16, 256);
  // The last rank runs a norm's hooks once more in its first step: its parameter is persistent,
  // so the gathers (collectives) stay the same and only the recorded order differs.
  PrefetchRun run{.param = "cpu"};
  run.bucket = 60000;
  run.extra_hooks_step = 1;
  run.extra_hooks_rank = comm.world_size() - 1;
  run.probe = "model.layers.0.input_layernorm";
  const PrefetchOutcome got = testing::TrainPrefetch(comm, run, data);
  EXPECT_THAT(got.status, StatusIs(StatusCode::kFailedPrecondition,
                                   HasSubstr("rank " + std::to_string(comm.world_size() - 1) +
                                             " ran its modules in another order than rank 0")));
}

}  // namespace
}  // namespace strata
