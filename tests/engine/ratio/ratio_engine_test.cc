// The engine with partial offload (zero_optimization.offload_optimizer.ratio < 1): the first
// sub-groups step on the device, the last on the CPU. Same math, any placement: a tiny Llama
// trained at ZeRO stage 1/2/3 x ratio {0.5, 0.25} x fp32/bf16 with >= 4 sub-groups ends with the
// bits of the ratio-1 run and of the stage-0 run, with the same gradient norms every step; the
// device and pinned bytes move by the split; checkpoints cross between ratios; the device part
// also runs the device kernels (host_opaque); the errors name the keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/optim/partial_offload.h"
#include "engine/plan/memory_plan.h"
#include "tests/engine/backend/backend_devices.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::BackendKind;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Masters = std::vector<std::vector<float>>;

constexpr int kSteps = 3;
constexpr int64_t kGas = 2;
constexpr int64_t kSubGroup = 60000;  // tiny (~0.85M parameters) in >= 4 sub-groups

struct RunSpec {
  int stage = 1;
  double ratio = 1.0;
  DType dtype = DType::kFloat32;
  BackendKind backend = BackendKind::kHost;
  bool offload_param = false;  // stage 3: offload_param.device = cpu
};

std::string ZeroKeys(const RunSpec& r) {
  std::string z = "\"stage\": " + std::to_string(r.stage) +
                  ", \"sub_group_size\": " + std::to_string(kSubGroup) +
                  ", \"reduce_bucket_size\": 40000";
  if (r.stage >= 1) {
    z += ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false, \"ratio\": " +
         std::to_string(r.ratio) + "}";
  }
  if (r.stage == 3) z += ", \"stage3_param_persistence_threshold\": 200";
  if (r.offload_param) z += ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}";
  return z;
}

struct EngineRun {
  Config config;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

Result<EngineRun> MakeRun(const RunSpec& r) {
  EngineRun run;
  run.config = testing::MakeConfig(
      2, kGas, ZeroKeys(r), r.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "");
  STRATA_ASSIGN_OR_RETURN(run.device, testing::MakeBackendDevice(r.backend));
  run.comm = testing::MakeLocalComm();
  run.model = testing::MakeTinyModel(run.device.get(), r.dtype);
  EngineInit init;
  init.init_param = testing::TestInit(7);
  STRATA_ASSIGN_OR_RETURN(run.engine,
                          Engine::Initialize(*run.model, run.config, *run.comm, *run.device, init));
  return run;
}

const testing::TokenData& Data() {
  static const testing::TokenData data = testing::RandomTokens(3, 4 * kSteps * kGas, 2, 16, 256);
  return data;
}

struct Trained {
  Masters masters;
  std::vector<double> grad_norms;  // EngineStats::last_grad_norm after each step
  EngineStats stats;
};

// Trains `steps` steps from micro-batch `first` and records the gradient norms.
Trained TrainOn(Engine& e, int steps, size_t first = 0) {
  Trained out;
  for (int s = 0; s < steps; ++s) {
    out.masters = testing::TrainAndGather(e, Data(), 1, kGas, nullptr, first + s * kGas);
    out.grad_norms.push_back(e.stats().last_grad_norm);
  }
  out.stats = e.stats();
  return out;
}

// Runs cached by spec (the references are shared by many cases).
const Trained& Train(const RunSpec& r) {
  static std::map<std::tuple<int, double, int, int, bool>, Trained> cache;
  const auto key = std::make_tuple(r.stage, r.ratio, static_cast<int>(r.dtype),
                                   static_cast<int>(r.backend), r.offload_param);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Result<EngineRun> run = MakeRun(r);
  EXPECT_THAT(run.status(), IsOk());
  Trained res;
  if (run.ok()) res = TrainOn(*run->engine, kSteps);
  return cache.emplace(key, std::move(res)).first->second;
}

bool SameDoubles(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The split the engine takes for `spec` (sub-groups of the world-1 partition).
size_t SplitFor(const RunSpec& r, const Engine& e) {
  Config c = testing::MakeConfig(2, kGas, ZeroKeys(r));
  return PartialOffloadSplit(c.zero, e.layout().SubGroups(kSubGroup));
}

class PartialOffloadTest : public ::testing::TestWithParam<std::tuple<int, double, DType>> {};

TEST_P(PartialOffloadTest, GivesTheBitsOfRatioOneAndStageZero) {
  const auto [stage, ratio, dtype] = GetParam();
  const Trained& part = Train({.stage = stage, .ratio = ratio, .dtype = dtype});
  const Trained& full = Train({.stage = stage, .ratio = 1.0, .dtype = dtype});
  const Trained& stage0 = Train({.stage = 0, .dtype = dtype});
  ASSERT_FALSE(part.masters.empty());
  EXPECT_TRUE(testing::SameBits(part.masters, full.masters)) << "vs ratio 1";
  EXPECT_TRUE(testing::SameBits(part.masters, stage0.masters)) << "vs stage 0";
  EXPECT_TRUE(SameDoubles(part.grad_norms, full.grad_norms));
  EXPECT_TRUE(SameDoubles(part.grad_norms, stage0.grad_norms));
  EXPECT_GT(part.grad_norms.back(), 0.0);
}

TEST_P(PartialOffloadTest, MovesTheStateBytesByTheSplit) {
  const auto [stage, ratio, dtype] = GetParam();
  const RunSpec spec{.stage = stage, .ratio = ratio, .dtype = dtype};
  Result<EngineRun> part = MakeRun(spec);
  ASSERT_THAT(part.status(), IsOk());
  RunSpec one = spec;
  one.ratio = 1.0;
  Result<EngineRun> full = MakeRun(one);
  ASSERT_THAT(full.status(), IsOk());
  const size_t n = part->engine->layout().partition_numel();
  const size_t split = SplitFor(spec, *part->engine);
  // DeepSpeed's rule: int((1 - ratio) * groups) sub-groups stay on the device.
  const size_t groups = part->engine->layout().SubGroups(kSubGroup).size();
  ASSERT_GE(groups, 4u);
  ASSERT_GT(split, 0u);
  ASSERT_LT(split, n);
  EXPECT_EQ(PartialOffloadDeviceGroups(groups, ratio),
            static_cast<size_t>((1.0 - ratio) * static_cast<double>(groups)));
  // Master + moments of [0, split) on the device (its gradient is the gradient partition the
  // engine has anyway at stage 1; stages 2-3 reduce the rest straight into host memory, so there
  // it is 4 B more); master + moments + gradient of the rest pinned.
  const EngineStats& p = part->engine->stats();
  const EngineStats& f = full->engine->stats();
  const size_t grad_dev = stage >= 2 ? 4 * split : 0;  // engine/zero/grad/grad_reducer.h
  EXPECT_EQ(p.device_bytes - f.device_bytes, 12 * split + grad_dev);
  EXPECT_EQ(f.cpu_bytes - p.cpu_bytes, 16 * split);

  // The plan moves the same way (`strata estimate --config` prints it).
  std::vector<uint64_t> numels;
  for (const ShardSlice& s : part->engine->layout().slices()) numels.push_back(s.numel);
  const PlanOptions po{.world = 1, .rank = 0, .include_activations = false};
  Result<MemoryPlan> pp = PlanEngineMemory(ShapeFromNumels(numels), part->config, po);
  Result<MemoryPlan> fp = PlanEngineMemory(ShapeFromNumels(numels), full->config, po);
  ASSERT_THAT(pp.status(), IsOk());
  ASSERT_THAT(fp.status(), IsOk());
  const auto dev = static_cast<size_t>(PlanTier::kDevice);
  EXPECT_EQ(pp->tier_bytes[dev] - fp->tier_bytes[dev],
            (12 * split + 255) / 256 * 256 + (grad_dev + 255) / 256 * 256);
  EXPECT_LT(pp->tier_bytes[static_cast<size_t>(PlanTier::kPageableCpu)] +
                pp->tier_bytes[static_cast<size_t>(PlanTier::kPinnedCpu)],
            fp->tier_bytes[static_cast<size_t>(PlanTier::kPageableCpu)] +
                fp->tier_bytes[static_cast<size_t>(PlanTier::kPinnedCpu)]);
  // Stage 1 copies the partition's CPU part once per step; stages 2-3 each micro-batch's reduced
  // shards of the CPU part (padding included, alignment gaps not).
  size_t device_shards = 0, host_shards = 0;
  for (const ShardSlice& s : part->engine->layout().slices()) {
    (s.flat_offset < split ? device_shards : host_shards) += s.shard_numel;
  }
  EXPECT_EQ(fp->traffic.device_to_host_bytes - pp->traffic.device_to_host_bytes,
            stage >= 2 ? 4 * kGas * device_shards : 4 * split);

  // One step's traffic: only the CPU sub-groups cross the link.
  testing::TrainAndGather(*part->engine, Data(), 1, kGas);
  EXPECT_EQ(part->engine->last_breakdown().d2h_bytes,
            stage >= 2 ? 4 * kGas * host_shards : 4 * (n - split));
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, double, DType>>& i) {
  const auto [stage, ratio, dtype] = i.param;
  return "stage" + std::to_string(stage) + "_ratio" +
         std::to_string(static_cast<int>(ratio * 100)) + "_" +
         (dtype == DType::kBFloat16 ? "bf16" : "fp32");
}

INSTANTIATE_TEST_SUITE_P(StagesRatiosDtypes, PartialOffloadTest,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(0.5, 0.25),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         CaseName);

// The device part on memory the host cannot address (the GPU code path: device kernels for the
// step, the norm partials and the overflow check), and stage 3 with the shards in pinned CPU
// memory (the device sub-groups write their updated shards there).
TEST(PartialOffloadDeviceTest, DeviceKernelsAndOffloadedParamsGiveTheSameBits) {
  for (BackendKind backend : {BackendKind::kHost, BackendKind::kHostOpaque}) {
    for (int stage : {1, 3}) {
      for (bool offload_param : {false, true}) {
        if (offload_param && stage != 3) continue;
        SCOPED_TRACE(std::string(testing::BackendName(backend)) + " stage " +
                     std::to_string(stage) + (offload_param ? " offload_param cpu" : ""));
        const Trained& part = Train({.stage = stage,
                                     .ratio = 0.5,
                                     .dtype = DType::kBFloat16,
                                     .backend = backend,
                                     .offload_param = offload_param});
        const Trained& full = Train({.stage = stage, .ratio = 1.0, .dtype = DType::kBFloat16});
        ASSERT_FALSE(part.masters.empty());
        EXPECT_TRUE(testing::SameBits(part.masters, full.masters));
        EXPECT_TRUE(SameDoubles(part.grad_norms, full.grad_norms));
      }
    }
  }
}

// A checkpoint saved at ratio 0.5 loads at ratio 1 and the other way round, and continues as if
// uninterrupted (OptimizerState::Read/Write ranges cross the split).
TEST(PartialOffloadCheckpointTest, CrossesBetweenRatios) {
  for (BackendKind backend : {BackendKind::kHost, BackendKind::kHostOpaque}) {
    for (auto [save_ratio, load_ratio] : {std::pair{0.5, 1.0}, std::pair{1.0, 0.5}}) {
      SCOPED_TRACE(std::string(testing::BackendName(backend)) + " save at " +
                   std::to_string(save_ratio) + ", load at " + std::to_string(load_ratio));
      const DType dtype = DType::kBFloat16;
      testing::ScratchDir dir;
      Result<EngineRun> a =
          MakeRun({.stage = 3, .ratio = save_ratio, .dtype = dtype, .backend = backend});
      ASSERT_THAT(a.status(), IsOk());
      TrainOn(*a->engine, 2);
      ASSERT_THAT(a->engine->SaveCheckpoint(dir.File("c"), "t"), IsOk());
      Result<EngineRun> b =
          MakeRun({.stage = 3, .ratio = load_ratio, .dtype = dtype, .backend = backend});
      ASSERT_THAT(b.status(), IsOk());
      ASSERT_THAT(b->engine->LoadCheckpoint(dir.File("c"), "t").status(), IsOk());
      const Trained resumed = TrainOn(*b->engine, 2, 2 * kGas);
      Result<EngineRun> c = MakeRun({.stage = 3, .ratio = 1.0, .dtype = dtype});
      ASSERT_THAT(c.status(), IsOk());
      const Trained straight = TrainOn(*c->engine, 4);
      EXPECT_TRUE(testing::SameBits(resumed.masters, straight.masters));
      EXPECT_TRUE(SameDoubles(resumed.grad_norms,
                              {straight.grad_norms.begin() + 2, straight.grad_norms.end()}));
    }
  }
}

TEST(PartialOffloadErrorsTest, NameTheKeys) {
  // The config layer.
  RunContext rc;
  EXPECT_THAT(LoadConfigText(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization":
                  {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0}}})",
                             "t", rc)
                  .status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                             HasSubstr("= 0 is out of range: must be in (0, 1]"))));
  EXPECT_THAT(LoadConfigText(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization":
                  {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
                             "t", rc)
                  .status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                             HasSubstr("= 1.5 is out of range: must be in (0, 1]"))));
  EXPECT_THAT(LoadConfigText(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization":
                  {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/x",
                   "ratio": 0.5}}})",
                             "t", rc)
                  .status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                             HasSubstr("zero_optimization.offload_optimizer.device"),
                             HasSubstr("\"nvme\""))));

  // The engine, for configs built in code (no config check in front of it).
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  Config c = testing::MakeConfig(2, 1, ZeroKeys({.stage = 3, .ratio = 0.5}));
  for (double bad : {0.0, -0.5, 1.5}) {
    c.zero.offload_optimizer.ratio = bad;
    EXPECT_THAT(Engine::Initialize(*model, c, *comm, *device, init).status(),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                               HasSubstr("must be in (0, 1]"))))
        << bad;
  }
  c.zero.offload_optimizer.ratio = 0.5;
  c.zero.offload_optimizer.device = OffloadDevice::kNvme;
  EXPECT_THAT(Engine::Initialize(*model, c, *comm, *device, init).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                             HasSubstr("zero_optimization.offload_optimizer.device = \"nvme\""))));
}

}  // namespace
}  // namespace strata
