// The engine with offload_optimizer.device = nvme (master + moments swapped per sub-group through
// the pipelined swapper): bit-identical parameters and losses to stage 0 with nothing offloaded,
// at stages 1 and 2 (which DeepSpeed does not offer) and 3 with the parameters on the device or
// the CPU, fp32 and bf16, pipelining on and off; a checkpoint save/resume with the
// state on NVMe equal bitwise to the uninterrupted run; the fit check at Initialize; and the trace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::SameBits;

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct NvmeCase {
  int stage = 1;
  DType dtype = DType::kFloat32;
  bool pipeline = false;       // pipeline_read and pipeline_write
  const char* param = "none";  // offload_param.device (stage 3)
};

std::string CaseName(const ::testing::TestParamInfo<NvmeCase>& info) {
  const NvmeCase& c = info.param;
  std::string n = "stage" + std::to_string(c.stage) + "_" + std::string(DTypeName(c.dtype));
  if (c.stage == 3) n += std::string("_param_") + c.param;
  return n + (c.pipeline ? "_pipelined" : "_serial");
}

std::string DtypeKeys(DType d) {
  return d == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
}

// zero_optimization for the optimizer on NVMe at `path` (several sub-groups, small buckets).
std::string NvmeZeroKeys(const NvmeCase& c, const std::string& path) {
  std::string z = "\"stage\": " + std::to_string(c.stage) +
                  ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
                  " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
                  path + "\", \"pin_memory\": false, \"buffer_count\": 2, \"pipeline_read\": " +
                  (c.pipeline ? "true" : "false") +
                  ", \"pipeline_write\": " + (c.pipeline ? "true" : "false") + "}";
  if (c.stage == 3) {
    z += ", \"stage3_param_persistence_threshold\": 200, \"offload_param\": {\"device\": \"" +
         std::string(c.param) + "\", \"pin_memory\": false}";
  }
  return z;
}

struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

EngineRun MakeEngine(Communicator& comm, DType dtype, const std::string& zero, uint64_t seed,
                     int64_t gas = 1, const std::string& extra = "") {
  EngineRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), dtype);
  Config config = testing::MakeConfig(2, gas, zero, DtypeKeys(dtype) + extra);
  EngineInit init;
  init.init_param = testing::TestInit(seed);
  Result<std::unique_ptr<Engine>> e = Engine::Initialize(*r.model, config, comm, *r.device, init);
  EXPECT_THAT(e.status(), IsOk());
  if (e.ok()) r.engine = std::move(e).value();
  return r;
}

class EngineNvmeSameMathTest : public ::testing::TestWithParam<NvmeCase> {};

TEST_P(EngineNvmeSameMathTest, EqualsStageZeroWithNothingOffloadedBitwise) {
  const NvmeCase c = GetParam();
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(11, 3, 2, 16, 256);
  std::vector<float> base_losses, got_losses;
  std::vector<std::vector<float>> base, got;
  {
    EngineRun b = MakeEngine(*comm, c.dtype, "\"stage\": 0", 7);
    ASSERT_NE(b.engine, nullptr);
    base = testing::TrainAndGather(*b.engine, data, 3, 1, &base_losses);
  }
  ScratchDir dir;
  EngineRun r = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap")), 7);
  ASSERT_NE(r.engine, nullptr);
  got = testing::TrainAndGather(*r.engine, data, 3, 1, &got_losses);
  EXPECT_TRUE(SameBits(base, got));
  EXPECT_EQ(base_losses, got_losses);
  ASSERT_EQ(got_losses.size(), 3u);
  // The NVMe state moved bytes and the breakdown says so.
  EXPECT_GT(r.engine->last_breakdown().nvme_read_bytes, 0u);
  EXPECT_GT(r.engine->last_breakdown().nvme_write_bytes, 0u);
  EXPECT_GT(r.engine->last_breakdown().step_ms, 0.0);
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;

INSTANTIATE_TEST_SUITE_P(
    Placements, EngineNvmeSameMathTest,
    ::testing::Values(NvmeCase{1, kF32, true}, NvmeCase{2, kBf16, true}, NvmeCase{2, kF32, false},
                      NvmeCase{3, kF32, false}, NvmeCase{3, kF32, true}, NvmeCase{3, kBf16, false},
                      NvmeCase{3, kBf16, true}, NvmeCase{3, kF32, false, "cpu"},
                      NvmeCase{3, kF32, true, "cpu"}, NvmeCase{3, kBf16, false, "cpu"},
                      NvmeCase{3, kBf16, true, "cpu"}),
    CaseName);

// Sizes as DeepSpeed allows them (issue 36): sub_group_size 0 (one parameter per sub-group) and
// "auto" sizing keys with params and optimizer on NVMe train bit-identically to stage 0 with
// nothing offloaded (Adam is element-wise: the sub-groups change only the I/O).
TEST(EngineNvmeSizesTest, SubGroupSizeZeroAndAutoSizesEqualStageZeroBitwise) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(11, 3, 2, 16, 256);
  std::vector<float> base_losses, got_losses;
  std::vector<std::vector<float>> base, got;
  {
    EngineRun b = MakeEngine(*comm, kBf16, "\"stage\": 0", 7);
    ASSERT_NE(b.engine, nullptr);
    base = testing::TrainAndGather(*b.engine, data, 3, 1, &base_losses);
  }
  ScratchDir dir;
  const std::string path = dir.File("swap");
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 0, \"reduce_bucket_size\": 40000,"
      " \"stage3_param_persistence_threshold\": 200, \"stage3_max_live_parameters\": \"auto\","
      " \"stage3_max_reuse_distance\": \"auto\","
      " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
      path +
      "\", \"pin_memory\": false, \"buffer_count\": \"auto\", \"pipeline_read\": true,"
      " \"pipeline_write\": true}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" +
      path +
      "\", \"pin_memory\": false, \"buffer_count\": \"auto\", \"buffer_size\": 100000,"
      " \"max_in_cpu\": \"auto\"}";
  EngineRun r = MakeEngine(*comm, kBf16, zero, 7);
  ASSERT_NE(r.engine, nullptr);
  got = testing::TrainAndGather(*r.engine, data, 3, 1, &got_losses);
  EXPECT_TRUE(SameBits(base, got));
  EXPECT_EQ(base_losses, got_losses);
  // One sub-group per parameter; the "auto" keys took DeepSpeed's defaults.
  EXPECT_EQ(r.engine->layout().SubGroups(0).size(), r.engine->layout().slices().size());
  EXPECT_EQ(r.engine->config().zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(r.engine->config().zero.offload_param.buffer_count, 5);
  EXPECT_EQ(r.engine->config().zero.max_live_parameters, 1000000000);
  EXPECT_GT(r.engine->last_breakdown().nvme_read_bytes, 0u);
}

// Every parameter's master | exp_avg | exp_avg_sq from a saved checkpoint.
std::vector<std::vector<float>> ReadArrays(const std::string& dir, const std::string& tag) {
  std::vector<std::vector<float>> out;
  Result<CheckpointReader> r = CheckpointReader::Open(dir, tag);
  EXPECT_THAT(r.status(), IsOk());
  if (!r.ok()) return out;
  for (size_t i = 0; i < r->manifest().params.size(); ++i) {
    const size_t n = r->manifest().params[i].numel;
    std::vector<float> v(3 * n);
    for (int a = 0; a < 3; ++a) {
      EXPECT_THAT(r->Read(i, static_cast<CheckpointArray>(a), 0, {v.data() + a * n, n}), IsOk());
    }
    out.push_back(std::move(v));
  }
  return out;
}

class EngineNvmeCheckpointTest : public ::testing::TestWithParam<NvmeCase> {};

TEST_P(EngineNvmeCheckpointTest, SaveLoadContinueEqualsUninterruptedBitwise) {
  const NvmeCase c = GetParam();
  auto comm = testing::MakeLocalComm();
  constexpr int kGas = 2, kSteps = 4, kAt = 2;
  const testing::TokenData data = testing::RandomTokens(5, kSteps * kGas, 2, 16, 256);
  ScratchDir dir;
  const std::string ckpt = dir.File("ckpt");
  std::vector<float> losses_a, losses_c;
  EngineRun a = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap_a")), 17, kGas);
  ASSERT_NE(a.engine, nullptr);
  const auto masters_a = testing::TrainAndGather(*a.engine, data, kSteps, kGas, &losses_a);
  ASSERT_THAT(a.engine->SaveCheckpoint(ckpt, "a"), IsOk());
  {
    EngineRun b = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap_b")), 17, kGas);
    ASSERT_NE(b.engine, nullptr);
    testing::TrainAndGather(*b.engine, data, kAt, kGas);
    ASSERT_THAT(b.engine->SaveCheckpoint(ckpt, "b"), IsOk());
  }
  // Other initial values; the load replaces them.
  EngineRun r = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap_c")), 99, kGas);
  ASSERT_NE(r.engine, nullptr);
  ASSERT_THAT(r.engine->LoadCheckpoint(ckpt, "b").status(), IsOk());
  EXPECT_EQ(r.engine->stats().global_steps, kAt);
  const auto masters_c =
      testing::TrainAndGather(*r.engine, data, kSteps - kAt, kGas, &losses_c, kAt * kGas);
  ASSERT_THAT(r.engine->SaveCheckpoint(ckpt, "c"), IsOk());
  EXPECT_TRUE(SameBits(masters_a, masters_c));
  EXPECT_TRUE(SameBits(ReadArrays(ckpt, "a"), ReadArrays(ckpt, "c"))) << "moments differ";
  ASSERT_EQ(losses_c.size(), static_cast<size_t>((kSteps - kAt) * kGas));
  for (size_t i = 0; i < losses_c.size(); ++i) {
    EXPECT_EQ(losses_a[kAt * kGas + i], losses_c[i]) << "micro-batch " << kAt * kGas + i;
  }
}

TEST_P(EngineNvmeCheckpointTest, NvmeCheckpointLoadsIntoCpuOffloadBitwise) {
  // The streamed shard is the same file format: a cpu-offload engine resumes it identically.
  const NvmeCase c = GetParam();
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(5, 4, 2, 16, 256);
  ScratchDir dir;
  const std::string ckpt = dir.File("ckpt");
  EngineRun a = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap")), 17, 1);
  ASSERT_NE(a.engine, nullptr);
  testing::TrainAndGather(*a.engine, data, 2, 1);
  ASSERT_THAT(a.engine->SaveCheckpoint(ckpt, "n"), IsOk());
  const std::string cpu_zero = "\"stage\": " + std::to_string(c.stage) +
                               ", \"sub_group_size\": 3000, \"offload_optimizer\": {\"device\": "
                               "\"cpu\", \"pin_memory\": false}";
  EngineRun b = MakeEngine(*comm, c.dtype, cpu_zero, 99, 1);
  ASSERT_NE(b.engine, nullptr);
  ASSERT_THAT(b.engine->LoadCheckpoint(ckpt, "n").status(), IsOk());
  ASSERT_THAT(b.engine->SaveCheckpoint(ckpt, "cpu"), IsOk());
  EXPECT_TRUE(SameBits(ReadArrays(ckpt, "n"), ReadArrays(ckpt, "cpu")));
}

INSTANTIATE_TEST_SUITE_P(Placements, EngineNvmeCheckpointTest,
                         ::testing::Values(NvmeCase{3, kF32, true, "cpu"},
                                           NvmeCase{3, kBf16, false}, NvmeCase{2, kBf16, true}),
                         CaseName);

TEST(EngineFitCheckTest, CappedDeviceFailsAtInitializeWithTheTierTable) {
  auto device = testing::MakeHostDevice(uint64_t{1} << 20);  // 1 MiB: the tiny model needs ~4
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  Config config = testing::MakeConfig(2, 1, "\"stage\": 2");
  EXPECT_THAT(Engine::Initialize(*model, config, *comm, *device, init).status(),
              StatusIs(StatusCode::kOutOfMemory,
                       ::testing::AllOf(HasSubstr("engine memory plan does not fit"),
                                        HasSubstr("tier device needs"), HasSubstr("capacity"),
                                        HasSubstr("needed:"))));
}

// Initialize's progress while it writes the initial values (the NVMe state first of all): with
// no interval, once before each parameter and once at the end, counting up to every parameter
// and element of the model; with the default interval a tiny model's Initialize says nothing.
TEST(EngineInitProgressTest, CountsEveryParameterAndStaysSilentWhenQuick) {
  ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), kF32);
  uint64_t elements = 0;
  for (const nn::Parameter* p : model->NamedParameters())
    elements += static_cast<uint64_t>(p->numel());
  const int64_t params = static_cast<int64_t>(model->NamedParameters().size());
  Config config = testing::MakeConfig(2, 1, NvmeZeroKeys(NvmeCase{3, kF32, true}, dir.path()));
  std::vector<InitProgress> seen;
  EngineInit init;
  init.init_param = testing::TestInit(1);
  init.progress = [&](const InitProgress& p) { seen.push_back(p); };
  init.progress_interval_s = 0;
  ASSERT_THAT(Engine::Initialize(*model, config, *comm, *device, init).status(), IsOk());
  ASSERT_EQ(seen.size(), static_cast<size_t>(params) + 1);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].params_done, static_cast<int64_t>(i));
    EXPECT_EQ(seen[i].params_total, params);
    EXPECT_EQ(seen[i].elements_total, elements);
    if (i > 0) {
      EXPECT_GE(seen[i].seconds, seen[i - 1].seconds);
    }
  }
  EXPECT_EQ(seen.back().elements_done, elements);

  seen.clear();
  auto model2 = testing::MakeTinyModel(device.get(), kF32);
  init.progress_interval_s = 600;
  ASSERT_THAT(Engine::Initialize(*model2, config, *comm, *device, init).status(), IsOk());
  EXPECT_TRUE(seen.empty());
}

TEST(EngineTraceTest, ShortRunWritesTheSpansAsChromeTraceJson) {
  ScratchDir dir;
  const std::string trace = dir.File("trace.json");
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(3, 2, 2, 16, 256);
  NvmeCase c{3, kF32, true};
  EngineRun r = MakeEngine(*comm, c.dtype, NvmeZeroKeys(c, dir.File("swap")), 7, 1,
                           "\"strata\": {\"trace_path\": \"" + trace + "\"},");
  ASSERT_NE(r.engine, nullptr);
  testing::TrainAndGather(*r.engine, data, 2, 1);
  ASSERT_THAT(r.engine->FlushTrace(), IsOk());
  std::ifstream in(trace);
  ASSERT_TRUE(in.good()) << trace;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  const nlohmann::json& events = j.is_array() ? j : j["traceEvents"];
  std::set<std::string> names;
  for (const auto& e : events) {
    if (e.value("ph", "") == "X") names.insert(e.value("name", ""));
  }
  for (const char* want : {"forward", "backward", "step", "d2h grads", "h2d params", "grad norm",
                           "optimizer", "optimizer step (nvme)"}) {
    EXPECT_TRUE(names.contains(want)) << "no span " << want;
  }
}

}  // namespace
}  // namespace strata
