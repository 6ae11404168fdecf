// The engine's same-math promise on each device kind: a tiny Llama trained a few steps at world 1
// with ZeRO stage 0, 1, 2 and 3 (optimizer state on the device) gives bit-identical fp32 masters on
// the device under test. On `host_opaque` the optimizer runs the device kernels (the GPU code
// path) and must also equal the `host` run (the CPU kernels on device memory) bit for bit; the
// `cuda` cases skip here with "no CUDA device: ...". A checkpoint saved from device-resident state
// (read through OptimizerState::Read where the host cannot address it) loads back bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>

#include "engine/checkpoint/checkpoint.h"
#include "tests/engine/backend/backend_devices.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::BackendKind;
using ::strata::testing::IsOk;

using Masters = std::vector<std::vector<float>>;

std::string DtypeKeys(DType d) {
  if (d == DType::kBFloat16) return "\"bf16\": {\"enabled\": true},";
  return "";
}

// One engine on a fresh device of `backend` (destroyed engine first).
struct BackendRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

Result<BackendRun> MakeRun(BackendKind backend, int stage, DType dtype, uint64_t seed) {
  BackendRun r;
  STRATA_ASSIGN_OR_RETURN(r.device, testing::MakeBackendDevice(backend));
  r.comm = testing::MakeLocalComm();
  r.model = testing::MakeTinyModel(r.device.get(), dtype);
  std::string zero = "\"stage\": " + std::to_string(stage) +
                     ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000";
  if (stage == 3) zero += ", \"stage3_param_persistence_threshold\": 200";
  Config config = testing::MakeConfig(2, 2, zero, DtypeKeys(dtype));
  EngineInit init;
  init.init_param = testing::TestInit(seed);
  STRATA_ASSIGN_OR_RETURN(r.engine, Engine::Initialize(*r.model, config, *r.comm, *r.device, init));
  return r;
}

// Trains `steps` steps with ZeRO `stage` on a fresh device of `backend`; empty on skip.
Result<Masters> Train(BackendKind backend, int stage, DType dtype, int steps) {
  STRATA_ASSIGN_OR_RETURN(BackendRun r, MakeRun(backend, stage, dtype, 7));
  const testing::TokenData data = testing::RandomTokens(3, 2 * steps, 2, 16, 256);
  return testing::TrainAndGather(*r.engine, data, steps, 2);
}

void ExpectBitwise(const Masters& got, const Masters& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << what << ", parameter " << i;
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
        << what << ": parameter " << i << " differs";
  }
}

class EngineBackendTest : public ::testing::TestWithParam<std::tuple<BackendKind, DType>> {};

TEST_P(EngineBackendTest, StagesZeroToThreeGiveTheSameBits) {
  const auto [backend, dtype] = GetParam();
  constexpr int kSteps = 3;
  Result<Masters> stage0 = Train(backend, 0, dtype, kSteps);
  if (!stage0.ok() && stage0.status().code() == StatusCode::kUnavailable) {
    GTEST_SKIP() << stage0.status().message();
  }
  ASSERT_THAT(stage0.status(), IsOk());
  for (int stage : {1, 2, 3}) {
    Result<Masters> r = Train(backend, stage, dtype, kSteps);
    ASSERT_THAT(r.status(), IsOk());
    ExpectBitwise(*r, *stage0, "stage " + std::to_string(stage) + " vs stage 0");
  }
  if (backend == BackendKind::kHostOpaque) {  // device kernels vs the CPU kernels, same device
    Result<Masters> host = Train(BackendKind::kHost, 0, dtype, kSteps);
    ASSERT_THAT(host.status(), IsOk());
    ExpectBitwise(*stage0, *host, "device optimizer kernels vs cpu_adam on device memory");
  }
  // The run moved the weights (a step that did nothing would also be "the same").
  Result<Masters> none = Train(backend, 0, dtype, 0);
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_NE(std::memcmp((*none)[0].data(), (*stage0)[0].data(), (*none)[0].size() * 4), 0);
}

// Every parameter's master | exp_avg | exp_avg_sq from a checkpoint.
Masters ReadArrays(const std::string& dir, const std::string& tag) {
  Masters out;
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

TEST_P(EngineBackendTest, CheckpointRoundTripsDeviceStateBitwise) {
  const auto [backend, dtype] = GetParam();
  for (int stage : {0, 3}) {
    Result<BackendRun> a = MakeRun(backend, stage, dtype, 7);
    if (!a.ok() && a.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << a.status().message();
    }
    ASSERT_THAT(a.status(), IsOk());
    const testing::TokenData data = testing::RandomTokens(3, 6, 2, 16, 256);
    testing::TrainAndGather(*a->engine, data, 2, 2);
    testing::ScratchDir dir;
    const std::string ckpt = dir.File("ckpt");
    ASSERT_THAT(a->engine->SaveCheckpoint(ckpt, "a"), IsOk());
    Result<BackendRun> b = MakeRun(backend, stage, dtype, 99);  // other initial values
    ASSERT_THAT(b.status(), IsOk());
    ASSERT_THAT(b->engine->LoadCheckpoint(ckpt, "a").status(), IsOk());
    ASSERT_THAT(b->engine->SaveCheckpoint(ckpt, "b"), IsOk());
    ExpectBitwise(ReadArrays(ckpt, "b"), ReadArrays(ckpt, "a"),
                  "stage " + std::to_string(stage) + " reloaded state");
    // And both continue the same.
    ExpectBitwise(testing::TrainAndGather(*b->engine, data, 1, 2, nullptr, 4),
                  testing::TrainAndGather(*a->engine, data, 1, 2, nullptr, 4),
                  "stage " + std::to_string(stage) + " step after the load");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineBackendTest,
                         ::testing::Combine(::testing::ValuesIn(testing::AllBackends()),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const auto& info) {
                           return std::string(testing::BackendName(std::get<0>(info.param))) + "_" +
                                  std::string(DTypeName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace strata
