// The engine's same-math promise on each device kind: a tiny Llama trained a few steps at world 1
// with ZeRO stage 0, 1 and 2 (optimizer state on the device) gives bit-identical fp32 masters on
// the device under test. On `host_opaque` the optimizer runs the device kernels (the GPU code
// path) and must also equal the `host` run (the CPU kernels on device memory) bit for bit; the
// `cuda` cases skip here with "no CUDA device: ...".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>

#include "tests/engine/backend/backend_devices.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::BackendKind;
using ::strata::testing::IsOk;

using Masters = std::vector<std::vector<float>>;

std::string DtypeKeys(DType d) {
  if (d == DType::kBFloat16) return "\"bf16\": {\"enabled\": true},";
  return "";
}

// Trains `steps` steps with ZeRO `stage` on a fresh device of `backend`; empty on skip.
Result<Masters> Train(BackendKind backend, int stage, DType dtype, int steps) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, testing::MakeBackendDevice(backend));
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), dtype);
  const std::string zero = "\"stage\": " + std::to_string(stage) +
                           ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000";
  Config config = testing::MakeConfig(2, 2, zero, DtypeKeys(dtype));
  EngineInit init;
  init.init_param = testing::TestInit(7);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Initialize(*model, config, *comm, *device, init));
  const testing::TokenData data = testing::RandomTokens(3, 2 * steps, 2, 16, 256);
  return testing::TrainAndGather(*engine, data, steps, 2);
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

TEST_P(EngineBackendTest, StagesZeroOneTwoGiveTheSameBits) {
  const auto [backend, dtype] = GetParam();
  constexpr int kSteps = 3;
  Result<Masters> stage0 = Train(backend, 0, dtype, kSteps);
  if (!stage0.ok() && stage0.status().code() == StatusCode::kUnavailable) {
    GTEST_SKIP() << stage0.status().message();
  }
  ASSERT_THAT(stage0.status(), IsOk());
  for (int stage : {1, 2}) {
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

INSTANTIATE_TEST_SUITE_P(Backends, EngineBackendTest,
                         ::testing::Combine(::testing::ValuesIn(testing::AllBackends()),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const auto& info) {
                           return std::string(testing::BackendName(std::get<0>(info.param))) + "_" +
                                  std::string(DTypeName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace strata
