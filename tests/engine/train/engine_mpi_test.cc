// The engine on 2 or 3 ranks under mpirun (engine_mpi_world2 / engine_mpi_world3):
//  - every ZeRO stage and placement agrees with stage 0 on one rank that holds the whole global
//    batch, within a tolerance justified below (the gradient is summed in another order);
//  - stages whose gradient reduction is the same collective agree bit for bit on the same ranks
//    (stages 2 and 3 reduce-scatter each parameter; stages 0 and 1 all-reduce); with two ranks
//    every sum is a + b in either order, so there everything is bitwise equal to stage 0;
//  - the data-parallel gradient norm equals that of one rank holding every rank's batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "engine/comm/registry.h"
#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::SameBits;

using ::strata::testing::IsOk;

struct Placement {
  int stage = 0;
  const char* opt = "none";    // offload_optimizer.device
  const char* param = "none";  // offload_param.device (stage 3)
  bool overlap = false;
  DType dtype = DType::kFloat32;
  bool tied = false;           // tie_word_embeddings
  bool checkpointing = false;  // activation checkpointing
  double ratio = 1.0;          // offload_optimizer.ratio (partial offload)
};

std::string Describe(const Placement& r) {
  return "stage " + std::to_string(r.stage) + " opt " + r.opt + " param " + r.param +
         (r.overlap ? " overlap" : "") + (r.tied ? " tied" : "") +
         (r.checkpointing ? " checkpointing" : "") +
         (r.ratio < 1 ? " ratio " + std::to_string(r.ratio) : "") + " " +
         std::string(DTypeName(r.dtype));
}

struct RunOutcome {
  std::vector<std::vector<float>> masters;
  double first_norm = 0;
};

// Adam with eps = 1: the update lr * m / (sqrt(v) + 1) is Lipschitz in the gradient (constant
// <= lr per step), where the default eps makes the first steps lr * sign(g) — a gradient of ~0
// could then move a weight by +-lr under two summation orders, and no tolerance would be honest.
constexpr const char* kLipschitzAdam = "\"lr\": 0.01, \"weight_decay\": 0.1, \"eps\": 1.0";

// Rank r trains on batches r, r + world, ... of `data`.
RunOutcome TrainOnRanks(Communicator& comm, const Placement& run, const testing::TokenData& data,
                        int steps, double clip, const char* optimizer = testing::kDefaultAdamW) {
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), run.dtype, run.tied, run.checkpointing);
  const std::string dtype_keys =
      run.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
  std::string zero = "\"stage\": " + std::to_string(run.stage) +
                     ", \"sub_group_size\": 5000, \"reduce_bucket_size\": 40000, " +
                     "\"overlap_comm\": " + (run.overlap ? "true" : "false") +
                     ", \"offload_optimizer\": {\"device\": \"" + run.opt +
                     "\", \"pin_memory\": false" +
                     (run.ratio < 1 ? ", \"ratio\": " + std::to_string(run.ratio) : "") + "}";
  if (run.stage == 3) {
    zero += ", \"stage3_param_persistence_threshold\": 200, \"offload_param\": {\"device\": \"" +
            std::string(run.param) + "\", \"pin_memory\": false}";
  }
  Config config =
      testing::MakeConfig(data.batch, 1, zero, dtype_keys, comm.world_size(), clip, optimizer);
  EngineInit init;
  init.init_param = testing::TestInit(17);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk()) << Describe(run);
  if (!engine.ok()) return {};
  RunOutcome r;
  // One step to read the first gradient norm, then the rest.
  r.masters =
      testing::TrainAndGather(**engine, data, 1, 1, nullptr, static_cast<size_t>(comm.rank()),
                              static_cast<size_t>(comm.world_size()));
  r.first_norm = (*engine)->stats().last_grad_norm;
  if (steps > 1) {
    r.masters = testing::TrainAndGather(**engine, data, steps - 1, 1, nullptr,
                                        static_cast<size_t>(comm.rank() + comm.world_size()),
                                        static_cast<size_t>(comm.world_size()));
  }
  return r;
}

// `data` with every `world` consecutive micro-batches concatenated into one.
testing::TokenData GlobalBatches(const testing::TokenData& data, int world) {
  testing::TokenData g;
  g.batch = data.batch * world;
  g.seq_len = data.seq_len;
  for (size_t i = 0; i + static_cast<size_t>(world) <= data.ids.size();
       i += static_cast<size_t>(world)) {
    std::vector<int32_t> ids;
    for (int r = 0; r < world; ++r) {
      ids.insert(ids.end(), data.ids[i + static_cast<size_t>(r)].begin(),
                 data.ids[i + static_cast<size_t>(r)].end());
    }
    g.ids.push_back(std::move(ids));
  }
  return g;
}

double MaxAbsDiff(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t j = 0; j < a[i].size(); ++j) {
      worst = std::max(worst, std::fabs(double(a[i][j]) - double(b[i][j])));
    }
  }
  return worst;
}

std::vector<Placement> Matrix(DType dtype) {
  std::vector<Placement> runs;
  for (const char* opt : {"none", "cpu"}) {
    runs.push_back({0, "none", "none", false, dtype});
    runs.push_back({1, opt, "none", false, dtype});
    runs.push_back({2, opt, "none", false, dtype});
    runs.push_back({2, opt, "none", true, dtype});
    for (const char* param : {"none", "cpu"}) runs.push_back({3, opt, param, true, dtype});
  }
  runs.push_back({3, "cpu", "cpu", false, dtype});
  // Partial offload: the first half of the sub-groups on the device, the rest on the CPU.
  runs.push_back({2, "cpu", "none", true, dtype, false, false, 0.5});
  runs.push_back({3, "cpu", "cpu", true, dtype, false, false, 0.5});
  return runs;
}

TEST(EngineMpiTest, StagesWithTheSameReductionAgreeBitwise) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2 or 3";
  const testing::TokenData data = testing::RandomTokens(31, 9, 2, 16, 256);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // No clipping: the global norm is summed in another order when partitioned.
    const RunOutcome all_reduce = TrainOnRanks(comm, {0, "none", "none", false, dtype}, data, 3, 0);
    const RunOutcome reduce_scatter =
        TrainOnRanks(comm, {2, "none", "none", false, dtype}, data, 3, 0);
    if (comm.world_size() == 2) {
      EXPECT_TRUE(SameBits(all_reduce.masters, reduce_scatter.masters)) << DTypeName(dtype);
    }
    for (const Placement& run : Matrix(dtype)) {
      const RunOutcome got = TrainOnRanks(comm, run, data, 3, 0);
      const RunOutcome& same = run.stage <= 1 ? all_reduce : reduce_scatter;
      EXPECT_TRUE(SameBits(same.masters, got.masters)) << Describe(run);
    }
  }
  // Tied embeddings (the head's gradient and the embedding's summed in one slot before the
  // reduce) and activation checkpointing (forward hooks again inside backward) at stage 3.
  Placement tied2{2, "none", "none", true, DType::kFloat32, true, false};
  Placement tied3{3, "cpu", "cpu", true, DType::kFloat32, true, true};
  const RunOutcome a = TrainOnRanks(comm, tied2, data, 3, 0);
  const RunOutcome b = TrainOnRanks(comm, tied3, data, 3, 0);
  EXPECT_TRUE(SameBits(a.masters, b.masters)) << Describe(tied3);
}

// World N against world 1 over the same global batch, fp32. The gradient differs only in the
// order of its sums (each rank's GEMMs over its own tokens and then N partial sums, against one
// GEMM over all tokens): per element at most a few fp32 roundings of the largest addend,
// |dg| <~ 1e-6 |g|max. With eps = 1 Adam's step is Lipschitz in g with constant <= lr = 0.01 and
// the weights are rounded to fp32 (spacing <= 2^-23 * 0.1 ~ 1.2e-8 here) after each of the 3
// steps, so the weights may differ by ~1e-8 plus 3 * lr * 1e-6 |g|max — well under 1e-6. A
// missing 1 / world or a gradient counted twice changes the first update by ~lr * |g| ~ 1e-4.
TEST(EngineMpiTest, EveryStageAgreesWithOneRankHoldingTheGlobalBatch) {
  Communicator& comm = testing::World();
  const int world = comm.world_size();
  const testing::TokenData data =
      testing::RandomTokens(41, static_cast<size_t>(3 * world), 2, 16, 256);
  auto alone = comm.Split(comm.rank(), 0);  // a world of one per rank
  ASSERT_THAT(alone.status(), IsOk());
  ASSERT_EQ((*alone)->world_size(), 1);
  const RunOutcome one = TrainOnRanks(**alone, {0, "none", "none", false, DType::kFloat32},
                                      GlobalBatches(data, world), 3, 0, kLipschitzAdam);
  for (const Placement& run : Matrix(DType::kFloat32)) {
    const RunOutcome got = TrainOnRanks(comm, run, data, 3, 0, kLipschitzAdam);
    EXPECT_LT(MaxAbsDiff(one.masters, got.masters), 1e-6) << Describe(run);
  }
}

TEST(EngineMpiTest, DataParallelGradientEqualsOneRankWithAllBatches) {
  Communicator& comm = testing::World();
  const int world = comm.world_size();
  const testing::TokenData data = testing::RandomTokens(37, static_cast<size_t>(world), 2, 16, 256);
  const RunOutcome many =
      TrainOnRanks(comm, {3, "cpu", "cpu", true, DType::kFloat32}, data, 1, 1.0);
  auto alone = comm.Split(comm.rank(), 0);
  ASSERT_THAT(alone.status(), IsOk());
  const RunOutcome one = TrainOnRanks(**alone, {0, "none", "none", false, DType::kFloat32},
                                      GlobalBatches(data, world), 1, 1.0);
  // The same gradient summed in another order (fp32).
  EXPECT_NEAR(many.first_norm, one.first_norm, 1e-5 * one.first_norm);
  EXPECT_GT(one.first_norm, 0.0);
}

}  // namespace
}  // namespace strata
