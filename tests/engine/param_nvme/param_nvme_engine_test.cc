// The engine with offload_param.device = nvme (stage 3): the tiny Llama with its parameter shards
// on NVMe, cycled through two swap buffers that hold about two of its largest shards, equals the
// same run with the shards on the device bit for bit (losses and fp32 masters), with the
// optimizer on the CPU or on NVMe, fp32 and bf16, and with max_in_cpu keeping some shards in CPU
// memory; a save/resume equals the uninterrupted run; a byte flipped in the swap file between
// steps fails the next gather with DataLoss naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::SameBits;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct ParamCase {
  DType dtype = DType::kFloat32;
  const char* opt = "cpu";  // offload_optimizer.device
  int64_t max_in_cpu = 0;   // offload_param.max_in_cpu
};

std::string CaseName(const ::testing::TestParamInfo<ParamCase>& info) {
  const ParamCase& c = info.param;
  return std::string(DTypeName(c.dtype)) + "_opt_" + c.opt +
         (c.max_in_cpu > 0 ? "_max_in_cpu_" + std::to_string(c.max_in_cpu) : "");
}

std::string DtypeKeys(DType d) {
  return d == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
}

// Stage 3 with the optimizer on `c.opt` and the parameter shards on `param` ("none" or "nvme").
// The tiny Llama's largest shard has 49152 elements: two buffers of 50000 hold two of them, so
// the shards cycle through the buffers many times a step.
std::string ZeroKeys(const ParamCase& c, const char* param, const ScratchDir& dir) {
  std::string z =
      "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000, "
      "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": \"" +
      std::string(c.opt) + "\", \"pin_memory\": false";
  if (std::string(c.opt) == "nvme") {
    z += ", \"nvme_path\": \"" + dir.File("opt_swap") + "\", \"buffer_count\": 2";
  }
  z += "}, \"offload_param\": {\"device\": \"" + std::string(param) + "\", \"pin_memory\": false";
  if (std::string(param) == "nvme") {
    z += ", \"nvme_path\": \"" + dir.File("param_swap") +
         "\", \"buffer_count\": 2, \"buffer_size\": 50000, \"max_in_cpu\": " +
         std::to_string(c.max_in_cpu);
  }
  return z + "}";
}

struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

EngineRun MakeEngine(Communicator& comm, DType dtype, const std::string& zero, uint64_t seed,
                     int64_t gas = 1) {
  EngineRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), dtype);
  Config config = testing::MakeConfig(2, gas, zero, DtypeKeys(dtype));
  EngineInit init;
  init.init_param = testing::TestInit(seed);
  Result<std::unique_ptr<Engine>> e = Engine::Initialize(*r.model, config, comm, *r.device, init);
  EXPECT_THAT(e.status(), IsOk()) << zero;
  if (e.ok()) r.engine = std::move(e).value();
  return r;
}

class EngineParamNvmeTest : public ::testing::TestWithParam<ParamCase> {};

TEST_P(EngineParamNvmeTest, EqualsParamsOnTheDeviceBitwise) {
  const ParamCase c = GetParam();
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(11, 6, 2, 16, 256);
  ScratchDir dir;
  std::vector<float> base_losses, got_losses;
  std::vector<std::vector<float>> base, got;
  {
    EngineRun b = MakeEngine(*comm, c.dtype, ZeroKeys(c, "none", dir), 7, 2);
    ASSERT_NE(b.engine, nullptr);
    base = testing::TrainAndGather(*b.engine, data, 3, 2, &base_losses);
  }
  EngineRun r = MakeEngine(*comm, c.dtype, ZeroKeys(c, "nvme", dir), 7, 2);
  ASSERT_NE(r.engine, nullptr);
  got = testing::TrainAndGather(*r.engine, data, 3, 2, &got_losses);
  ASSERT_EQ(got_losses.size(), 6u);
  EXPECT_EQ(base_losses, got_losses);
  EXPECT_TRUE(SameBits(base, got));
  // The shards came from NVMe and went back to it; the buffers are counted as CPU memory.
  EXPECT_GT(r.engine->last_breakdown().nvme_read_bytes, 0u);
  EXPECT_GT(r.engine->last_breakdown().nvme_write_bytes, 0u);
  EXPECT_GE(r.engine->stats().cpu_bytes, uint64_t{2} * 50000 * DTypeBytes(c.dtype));
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;

INSTANTIATE_TEST_SUITE_P(Placements, EngineParamNvmeTest,
                         ::testing::Values(ParamCase{kF32, "cpu"}, ParamCase{kBf16, "cpu"},
                                           ParamCase{kF32, "nvme"}, ParamCase{kBf16, "nvme"},
                                           // The embedding and the first layers' shards in CPU.
                                           ParamCase{kBf16, "cpu", 150000}),
                         CaseName);

TEST(EngineParamNvmeResumeTest, SaveLoadContinueEqualsUninterruptedBitwise) {
  const ParamCase c{kBf16, "cpu"};
  auto comm = testing::MakeLocalComm();
  constexpr int kGas = 2, kSteps = 4, kAt = 2;
  const testing::TokenData data = testing::RandomTokens(5, kSteps * kGas, 2, 16, 256);
  ScratchDir dir, dir_b, dir_c;
  const std::string ckpt = dir.File("ckpt");
  std::vector<float> losses_a, losses_c;
  EngineRun a = MakeEngine(*comm, c.dtype, ZeroKeys(c, "nvme", dir), 17, kGas);
  ASSERT_NE(a.engine, nullptr);
  const auto masters_a = testing::TrainAndGather(*a.engine, data, kSteps, kGas, &losses_a);
  {
    EngineRun b = MakeEngine(*comm, c.dtype, ZeroKeys(c, "nvme", dir_b), 17, kGas);
    ASSERT_NE(b.engine, nullptr);
    testing::TrainAndGather(*b.engine, data, kAt, kGas);
    ASSERT_THAT(b.engine->SaveCheckpoint(ckpt, "b"), IsOk());
  }
  // Other initial values; the load replaces them (and rewrites the shards on NVMe).
  EngineRun r = MakeEngine(*comm, c.dtype, ZeroKeys(c, "nvme", dir_c), 99, kGas);
  ASSERT_NE(r.engine, nullptr);
  ASSERT_THAT(r.engine->LoadCheckpoint(ckpt, "b").status(), IsOk());
  EXPECT_EQ(r.engine->stats().global_steps, kAt);
  const auto masters_c =
      testing::TrainAndGather(*r.engine, data, kSteps - kAt, kGas, &losses_c, kAt * kGas);
  EXPECT_TRUE(SameBits(masters_a, masters_c));
  ASSERT_EQ(losses_c.size(), static_cast<size_t>((kSteps - kAt) * kGas));
  for (size_t i = 0; i < losses_c.size(); ++i) {
    EXPECT_EQ(losses_a[kAt * kGas + i], losses_c[i]) << "micro-batch " << kAt * kGas + i;
  }
}

TEST(EngineParamNvmeFaultTest, AByteFlippedOnDiskFailsTheNextGatherWithDataLoss) {
  const ParamCase c{kF32, "cpu"};
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(3, 2, 2, 16, 256);
  ScratchDir dir;
  EngineRun r = MakeEngine(*comm, c.dtype, ZeroKeys(c, "nvme", dir), 7);
  ASSERT_NE(r.engine, nullptr);
  testing::TrainAndGather(*r.engine, data, 1, 1);
  // The first shard registered (the embedding's, gathered first by forward) starts the file.
  const std::string file = dir.File("param_swap") + "/strata-param-rank0.swap";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    char b = 0;
    f.seekg(4000);
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x01);
    f.seekp(4000);
    f.write(&b, 1);
  }
  EXPECT_THAT(r.engine->Forward(data.Batch(1)),
              StatusIs(StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(file), HasSubstr("checksum mismatch"))));
}

TEST(EngineParamNvmeConfigTest, ParamsOnNvmeNeedAHostOptimizer) {
  auto comm = testing::MakeLocalComm();
  ScratchDir dir;
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), kF32);
  Config config = testing::MakeConfig(
      2, 1,
      "\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" + dir.File("p") +
          "\", \"buffer_size\": 50000, \"buffer_count\": 2}");
  EngineInit init;
  init.init_param = testing::TestInit(1);
  EXPECT_THAT(Engine::Initialize(*model, config, *comm, *device, init).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("needs offload_optimizer.device cpu or nvme")));
}

}  // namespace
}  // namespace strata
