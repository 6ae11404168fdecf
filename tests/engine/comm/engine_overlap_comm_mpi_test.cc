// The engine on 2 ranks under mpirun with the communicator's size checks on
// (strata.comm_check_sizes; tests/engine/comm/mpi_test_main.cc turns them on) and
// zero_optimization.overlap_comm: gradients are reduce-scattered on the comm stream while the
// compute stream gathers (stage 3) and all-reduces norms, so collectives from two streams are in
// flight at once, each behind its size check. This used to abort inside OpenMPI (NBC_Progress
// error 15: a size check paired with another rank's collective; Note [Issue order with size
// checks] in engine/comm/collective_queue.h). Stages 2 and 3, optimizer on the device and on the
// CPU (with strata.overlap_step), a few steps: the parameters equal the same run without
// overlap_comm bit for bit (the same reduce-scatters in the same order, on another stream).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using testing::IsOk;

struct CommCase {
  int stage = 2;
  const char* opt = "none";    // offload_optimizer.device
  const char* param = "none";  // offload_param.device (stage 3)
};

std::string CaseName(const CommCase& c) {
  return "stage" + std::to_string(c.stage) + "_opt_" + c.opt +
         (c.stage == 3 ? std::string("_param_") + c.param : "");
}

// Three steps of `c` (gradient accumulation 2, several reduce buckets) on the world
// communicator; rank r takes micro-batches r, r + world, ... Returns every parameter's master.
std::vector<std::vector<float>> Train(const CommCase& c, bool overlap_comm) {
  Communicator& comm = testing::World();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kBFloat16);
  std::string zero = "\"stage\": " + std::to_string(c.stage) +
                     ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 2000, " +
                     "\"overlap_comm\": " + (overlap_comm ? "true" : "false") +
                     ", \"offload_optimizer\": {\"device\": \"" + c.opt +
                     "\", \"pin_memory\": false}";
  if (c.stage == 3) {
    zero += ", \"stage3_param_persistence_threshold\": 200, \"offload_param\": {\"device\": \"" +
            std::string(c.param) + "\", \"pin_memory\": false}";
  }
  std::string extra = "\"bf16\": {\"enabled\": true},";
  if (std::string(c.opt) != "none") extra += "\"strata\": {\"overlap_step\": true},";
  Config config = testing::MakeConfig(2, 2, zero, extra, comm.world_size(), /*clip=*/0);
  EngineInit init;
  init.init_param = testing::TestInit(29);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk()) << CaseName(c);
  if (!engine.ok()) return {};
  const testing::TokenData data = testing::RandomTokens(43, 32, 2, 16, 256);
  return testing::TrainAndGather(**engine, data, 3, 2, nullptr, static_cast<size_t>(comm.rank()),
                                 static_cast<size_t>(comm.world_size()));
}

class EngineOverlapCommMpiTest : public ::testing::TestWithParam<CommCase> {};

TEST_P(EngineOverlapCommMpiTest, SizeChecksWithOverlapCommTrainLikeWithout) {
  const std::vector<std::vector<float>> serial = Train(GetParam(), false);
  const std::vector<std::vector<float>> overlapped = Train(GetParam(), true);
  ASSERT_FALSE(serial.empty());
  EXPECT_TRUE(testing::SameBits(serial, overlapped));
}

INSTANTIATE_TEST_SUITE_P(Placements, EngineOverlapCommMpiTest,
                         ::testing::Values(CommCase{2, "none"}, CommCase{2, "cpu"},
                                           CommCase{3, "none", "none"}, CommCase{3, "cpu", "cpu"}),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace strata
