// strata.cpu_memory: read as bytes or "auto" (80% of MemAvailable, read here from /proc/meminfo,
// divided among the launcher's ranks on this node); the "auto" sizing keys chosen within it; and
// Engine::Initialize refusing below the minimum pipeline with an error whose advice works.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "engine/config/config.h"
#include "engine/plan/cpu_budget.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

uint64_t MemAvailableHere() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13)) * 1024;
  }
  return 0;
}

Config Load(const std::string& strata_keys) {
  Result<Config> c = LoadConfigText(
      R"({"train_micro_batch_size_per_gpu": 1, "strata": {)" + strata_keys + "}}", "t.json", {});
  EXPECT_THAT(c.status(), IsOk());
  return c.ok() ? *c : Config{};
}

TEST(CpuMemoryConfigTest, ReadsBytesAndSizes) {
  EXPECT_EQ(Load(R"("cpu_memory": "6G")").strata.cpu_memory_bytes, uint64_t{6} << 30);
  EXPECT_EQ(Load(R"("cpu_memory": 123456789)").strata.cpu_memory_bytes, 123456789u);
  EXPECT_EQ(Load("").strata.cpu_memory_bytes, 0u);  // no budget
}

TEST(CpuMemoryConfigTest, RefusesWhatIsNotASizeNamingTheKey) {
  Result<Config> c = LoadConfigText(R"({"strata": {"cpu_memory": "lots"}})", "t.json", {});
  EXPECT_THAT(c.status(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("strata.cpu_memory")));
}

TEST(CpuMemoryConfigTest, AutoIsEightyPercentOfMemAvailableSharedByTheNodesRanks) {
  const double avail = static_cast<double>(MemAvailableHere());
  ASSERT_GT(avail, 0);
  const double one = static_cast<double>(Load(R"("cpu_memory": "auto")").strata.cpu_memory_bytes);
  // MemAvailable moves while other processes run: within 10% of 0.8 x what this test read.
  EXPECT_NEAR(one, 0.8 * avail, 0.1 * 0.8 * avail);
  // Four ranks on this node (a torchrun-style launcher): each takes a quarter.
  setenv("RANK", "1", 1), setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1), setenv("LOCAL_WORLD_SIZE", "4", 1);
  const double four = static_cast<double>(Load(R"("cpu_memory": "auto")").strata.cpu_memory_bytes);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) unsetenv(v);
  EXPECT_NEAR(four, 0.8 * avail / 4, 0.1 * 0.8 * avail / 4);
  const Config c = Load(R"("cpu_memory": "auto")");
  EXPECT_THAT(c.report.origins.at("strata.cpu_memory").detail, HasSubstr("MemAvailable"));
}

// The NVMe placement of the engine tests, the buffer counts and sub-group written "auto".
std::string NvmeAutoZero(const std::string& path, const std::string& buffer_size) {
  return "\"stage\": 3, \"sub_group_size\": \"auto\", \"reduce_bucket_size\": 40000,"
         " \"stage3_param_persistence_threshold\": 200,"
         " \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" +
         path + "\", \"buffer_count\": \"auto\", \"buffer_size\": " + buffer_size +
         "},"
         " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
         path + "\", \"buffer_count\": \"auto\"}";
}

struct BudgetRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  Result<std::unique_ptr<Engine>> engine = InternalError("not run");
};

// Destroys in the right order: the engine, then the model, then the device.
void Release(BudgetRun* r) {
  r->engine = InternalError("released");
  r->model.reset();
  r->device.reset();
}

BudgetRun Initialize(Communicator& comm, const std::string& path, const std::string& cpu_memory,
                     const std::string& buffer_size = "\"auto\"") {
  BudgetRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), DType::kFloat32);
  const Config config = testing::MakeConfig(2, 1, NvmeAutoZero(path, buffer_size),
                                            "\"strata\": {\"cpu_memory\": " + cpu_memory + "},");
  EngineInit init;
  init.init_param = testing::TestInit(3);
  r.engine = Engine::Initialize(*r.model, config, comm, *r.device, init);
  return r;
}

TEST(CpuBudgetEngineTest, RefusesBelowTheMinimumAndStartsWithTheMinimumItNames) {
  auto comm = testing::MakeLocalComm();
  ScratchDir dir;
  BudgetRun low = Initialize(*comm, dir.File("swap"), "1048576");
  ASSERT_THAT(low.engine.status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("strata.cpu_memory = 1 MiB")));
  const std::string& m = low.engine.status().message();
  EXPECT_THAT(m, HasSubstr("below the minimum"));
  EXPECT_THAT(m, HasSubstr("pinned cpu"));  // the per-tier table
  // A plain search (std::regex trips GCC 12's -Wmaybe-uninitialized in the -O1 ASan tree).
  const std::string advice = "set strata.cpu_memory to at least ";
  const size_t at = m.find(advice);
  ASSERT_NE(at, std::string::npos) << m;
  const size_t digits = at + advice.size();
  const std::string minimum = m.substr(digits, m.find_first_not_of("0123456789", digits) - digits);
  ASSERT_FALSE(minimum.empty()) << m;
  Release(&low);

  // The advice works: with exactly the minimum it starts, every "auto" key at its smallest.
  BudgetRun at_min = Initialize(*comm, dir.File("swap"), minimum);
  ASSERT_THAT(at_min.engine.status(), IsOk());
  const ZeroConfig& z = (*at_min.engine)->config().zero;
  EXPECT_EQ(z.offload_optimizer.buffer_count, 1);
  EXPECT_EQ(z.offload_param.buffer_count, 1);
  EXPECT_EQ(z.sub_group_size, 0);
  // The tiny model's largest parameter (an MLP matrix, 128 x 384) fills the parameter buffer.
  EXPECT_EQ(z.offload_param.buffer_size, 128 * 384);
  // It trains.
  const testing::TokenData data = testing::RandomTokens(5, 2, 2, 16, 256);
  std::vector<float> losses;
  testing::TrainAndGather(**at_min.engine, data, 2, 1, &losses);
  EXPECT_EQ(losses.size(), 2u);
  Release(&at_min);

  // One byte less is refused.
  BudgetRun below = Initialize(*comm, dir.File("swap"), std::to_string(std::stoull(minimum) - 1));
  EXPECT_THAT(below.engine.status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("strata.cpu_memory")));
}

TEST(CpuBudgetEngineTest, AGenerousBudgetKeepsDeepSpeedsDefaults) {
  auto comm = testing::MakeLocalComm();
  ScratchDir dir;
  // buffer_size as written (DeepSpeed's 1e8 would make 5 x 400 MB of parameter buffers).
  BudgetRun r = Initialize(*comm, dir.File("swap"), "\"1G\"", "60000");
  ASSERT_THAT(r.engine.status(), IsOk());
  const Config& c = (*r.engine)->config();
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.zero.sub_group_size, 1000000000);
  EXPECT_THAT(c.report.origins.at("zero_optimization.sub_group_size").detail,
              HasSubstr("within strata.cpu_memory 1 GiB"));
}

// Each chosen key is the largest candidate whose plan fits: the plan fits the budget, and one
// step up for the sub-group (checked here through the plain plan) does not.
TEST(CpuBudgetPlanTest, ChoosesTheLargestSubGroupWhosePlanFits) {
  std::vector<uint64_t> numels(40, 1000000);  // 40 parameters of 1M elements
  Result<Config> c = LoadConfigText(
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
          "sub_group_size": "auto", "offload_optimizer": {"device": "nvme", "nvme_path": "/x",
          "buffer_count": 2}, "offload_param": {"device": "nvme", "nvme_path": "/x",
          "buffer_count": 2}},
          "strata": {"swap_chunk_bytes": 1073741824}})",
      "t.json", {});
  ASSERT_THAT(c.status(), IsOk());
  const ModelShape shape = ShapeFromNumels(numels);
  PlanOptions po;
  po.include_activations = false;
  // The smallest plan, sub_group_size 0 (one parameter per sub-group), plus room for sub-groups
  // of 5M elements (2 swap buffers x 12 B + 4 B of gradients read back from the NVMe region + the
  // updated parameters' write-back buffer and the overlapped step's two copy buffers, 3 x 4 B in
  // fp32, x 4M more) but not 10M. Swap chunks of 1 GiB leave the sub-groups uncut (with the default
  // 64 MiB chunk every sub_group_size past 5.6M elements costs the same: the planner should then
  // search swap_chunk_bytes, not done yet).
  Config zero = *c;
  zero.zero.sub_group_size = 0;
  const uint64_t min_cpu = PlannedCpuBytes(PlanEngineMemory(shape, zero, po).value());
  const uint64_t budget = min_cpu + 40 * 4000000 + 40 * 2000000 + (8 << 20);
  Result<BudgetPlan> b = PlanWithinCpuBudget(shape, *c, po, budget, c->zero.auto_sizes);
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(b->minimum_cpu_bytes, min_cpu);
  EXPECT_EQ(b->config.zero.sub_group_size, 5000000);
  EXPECT_LE(PlannedCpuBytes(b->plan), budget);
  Config up = b->config;
  up.zero.sub_group_size = 10000000;
  EXPECT_GT(PlannedCpuBytes(PlanEngineMemory(shape, up, po).value()), budget);
  // Keys written as numbers stay as written.
  EXPECT_EQ(b->config.zero.offload_optimizer.buffer_count, 2);
}

// The speculative overlapped step keeps each sub-group's master + moments (12 B) while clipping
// may still change the step (with the parameters on NVMe not its bf16 copy: the old parameters
// are the kept master rounded, engine/overlap/step_overlap.h): 12 B per offloaded element, at most
// 1 GiB, and nothing without clipping or with strata.overlap_step false. It is held during the
// steps only, so the tier counts it once against the other phases (Initialize's fp32 values of
// the largest parameter here): the whole-run items plus the largest phase.
TEST(PageablePlanTest, CountsTheSpeculativeStepsKeptCopiesInTheirPhase) {
  // `defer`: strata.deferred_updates (with it, a step over NVMe state keeps nothing; below).
  auto plan = [](int params, double clip, bool overlap, bool defer = false) {
    Result<Config> c = LoadConfigText(
        R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
            "gradient_clipping": )" +
            std::to_string(clip) + R"(, "strata": {"overlap_step": )" +
            (overlap ? "true" : "false") + R"(, "deferred_updates": )" +
            (defer ? "true" : "false") + R"(}, "zero_optimization": {"stage": 3,
            "offload_optimizer": {"device": "nvme", "nvme_path": "/x"},
            "offload_param": {"device": "nvme", "nvme_path": "/x"}}})",
        "t.json", {});
    EXPECT_THAT(c.status(), IsOk());
    PlanOptions po;
    po.include_activations = false;
    const std::vector<uint64_t> numels(static_cast<size_t>(params), 1000000);
    return PlanEngineMemory(ShapeFromNumels(numels), *c, po).value();
  };
  auto kept = [](const MemoryPlan& p) {
    uint64_t b = 0;
    for (const PlanItem& i : p.items) {
      if (i.what.rfind("speculative overlapped step", 0) == 0) {
        EXPECT_EQ(i.phase, PlanPhase::kSteps);
        b += i.bytes;
      }
    }
    return b;
  };
  const uint64_t init = uint64_t{4} * 1000000;  // the largest parameter's fp32 values
  const uint64_t pageable_tier = static_cast<uint64_t>(PlanTier::kPageableCpu);
  EXPECT_EQ(kept(plan(10, 1.0, true)), uint64_t{12} * 10 * 1000000);
  EXPECT_EQ(kept(plan(10, 0.0, true)), 0u);
  EXPECT_EQ(kept(plan(10, 1.0, false)), 0u);
  EXPECT_EQ(kept(plan(100, 1.0, true)), uint64_t{1} << 30);
  // The steps hold the kept copies and the host GEMM's fp32 copy of the largest 16-bit weight
  // (as large as initialisation's values, so unclipped the phases tie): the copies are the rise.
  const uint64_t gemm = uint64_t{4} * 1000000;
  EXPECT_EQ(
      plan(10, 1.0, true).tier_bytes[pageable_tier] - plan(10, 0.0, true).tier_bytes[pageable_tier],
      uint64_t{12} * 10 * 1000000 + gemm - std::max(init, gemm));
  EXPECT_EQ(plan(10, 1.0, false).tier_bytes[pageable_tier],
            plan(10, 0.0, false).tier_bytes[pageable_tier]);
  // Note [No speculation over NVMe state with deferral]: the state on NVMe and the updates
  // deferred (the default), nothing is kept; the pageable tier is the unclipped one.
  EXPECT_EQ(kept(plan(10, 1.0, true, true)), 0u);
  EXPECT_EQ(kept(plan(100, 1.0, true, true)), 0u);
  EXPECT_EQ(plan(10, 1.0, true, true).tier_bytes[pageable_tier],
            plan(10, 0.0, true, true).tier_bytes[pageable_tier]);
}

}  // namespace
}  // namespace strata
