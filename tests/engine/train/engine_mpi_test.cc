// The engine on 2 ranks under mpirun: every ZeRO stage and optimizer placement gives the same
// parameters, bit for bit, as stage 0 on the same 2 ranks (with two ranks every sum is a + b in
// either order, so even the reduction order is the same), and the data-parallel gradient equals
// the gradient of one rank holding both ranks' batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "engine/comm/registry.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

Communicator* g_world = nullptr;

struct RunOutcome {
  std::vector<std::vector<float>> masters;
  double first_norm = 0;
};

// Rank r trains on batches r, r + world, ... of `data`.
RunOutcome TrainOnRanks(Communicator& comm, int stage, const char* offload, DType dtype,
                        const testing::TokenData& data, int steps, double clip) {
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), dtype);
  const std::string dtype_keys = dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
  Config config = testing::MakeConfig(
      data.batch, 1,
      "\"stage\": " + std::to_string(stage) + ", \"sub_group_size\": 5000, " +
          "\"offload_optimizer\": {\"device\": \"" + offload + "\", \"pin_memory\": false}",
      dtype_keys, comm.world_size(), clip);
  EngineInit init;
  init.init_param = testing::TestInit(17);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk());
  RunOutcome r;
  // One step to read the first gradient norm, then the rest.
  r.masters =
      testing::TrainAndGather(**engine, data, 1, 1, nullptr, static_cast<size_t>(comm.rank()),
                              static_cast<size_t>(comm.world_size()));
  r.first_norm = (*engine)->stats().last_grad_norm;
  r.masters = testing::TrainAndGather(**engine, data, steps - 1, 1, nullptr,
                                      static_cast<size_t>(comm.rank() + comm.world_size()),
                                      static_cast<size_t>(comm.world_size()));
  return r;
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST(EngineMpiTest, EveryStageAndPlacementEqualsStageZeroBitwise) {
  Communicator& comm = *g_world;
  ASSERT_EQ(comm.world_size(), 2) << "run under mpirun -np 2";
  const testing::TokenData data = testing::RandomTokens(31, 6, 2, 16, 256);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // No clipping: the global norm is summed in another order when partitioned.
    const RunOutcome base = TrainOnRanks(comm, 0, "none", dtype, data, 3, 0.0);
    struct P {
      int stage;
      const char* offload;
    };
    for (P p : {P{1, "none"}, P{2, "none"}, P{1, "cpu"}, P{2, "cpu"}}) {
      const RunOutcome got = TrainOnRanks(comm, p.stage, p.offload, dtype, data, 3, 0.0);
      EXPECT_TRUE(SameBits(base.masters, got.masters))
          << "stage " << p.stage << " offload " << p.offload << " " << DTypeName(dtype);
    }
  }
}

TEST(EngineMpiTest, DataParallelGradientEqualsOneRankWithBothBatches) {
  Communicator& comm = *g_world;
  const testing::TokenData data = testing::RandomTokens(37, 2, 2, 16, 256);
  const RunOutcome two = TrainOnRanks(comm, 2, "cpu", DType::kFloat32, data, 1, 1.0);
  // One rank alone, both ranks' batches concatenated into a batch of 4.
  testing::TokenData both;
  both.batch = 4;
  both.seq_len = 16;
  std::vector<int32_t> ids = data.ids[0];
  ids.insert(ids.end(), data.ids[1].begin(), data.ids[1].end());
  both.ids.push_back(ids);
  // A world of one per rank: each rank splits off alone.
  auto alone = comm.Split(comm.rank(), 0);
  ASSERT_THAT(alone.status(), IsOk());
  ASSERT_EQ((*alone)->world_size(), 1);
  const RunOutcome one = TrainOnRanks(**alone, 0, "none", DType::kFloat32, both, 1, 1.0);
  // The same gradient summed in another order (fp32).
  EXPECT_NEAR(two.first_norm, one.first_norm, 1e-5 * one.first_norm);
  EXPECT_GT(one.first_norm, 0.0);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  strata::CommOptions options;
  options.backend = strata::CommBackend::kMpi;
  options.timeout_s = 120;
  auto comm = strata::CreateCommunicator(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<strata::Communicator> world = std::move(comm).value();
  strata::g_world = world.get();
  if (world->rank() != 0) {
    ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());  // rank 0 prints; failures still fail the run
  }
  const int rc = RUN_ALL_TESTS();
  world.reset();
  return rc;
}
