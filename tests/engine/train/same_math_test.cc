// The promise "same math, any placement" for the engine at world 1: every ZeRO stage, with the
// optimizer and (stage 3) the parameters on the device or offloaded to the CPU, with and without
// overlap_comm, activation checkpointing and tied embeddings, gives bit-identical parameters to
// stage 0 with nothing offloaded, for fp32 and bf16 training. (Multi-rank runs: engine_mpi_test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <tuple>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

struct Placement {
  int stage;
  const char* offload;  // offload_optimizer.device
  DType dtype;
  const char* param = "none";  // offload_param.device (stage 3)
  bool overlap = false;        // overlap_comm
  bool tied = false;           // tie_word_embeddings
  bool checkpointing = false;  // activation checkpointing
  double ratio = 1.0;          // offload_optimizer.ratio
};

std::string PlacementName(const ::testing::TestParamInfo<Placement>& info) {
  const Placement& p = info.param;
  std::string n = "stage" + std::to_string(p.stage) + "_opt_" + p.offload;
  if (p.stage == 3) n += std::string("_param_") + p.param;
  n += "_" + std::string(DTypeName(p.dtype));
  if (p.overlap) n += "_overlap";
  if (p.tied) n += "_tied";
  if (p.checkpointing) n += "_ckpt";
  if (p.ratio != 1.0) n += "_ratio" + std::to_string(static_cast<int>(p.ratio * 100));
  return n;
}

void PrintTo(const Placement& p, std::ostream* os) {
  *os << PlacementName(::testing::TestParamInfo<Placement>(p, 0));
}

std::string DtypeKeys(DType d) {
  if (d == DType::kBFloat16) return "\"bf16\": {\"enabled\": true},";
  if (d == DType::kFloat16) return "\"fp16\": {\"enabled\": true},";
  return "";
}

// The zero_optimization body for `p`. Small buckets (several per backward) and a persistence
// threshold that keeps the norms (128 elements) gathered and releases every matrix.
std::string ZeroKeys(const Placement& p) {
  std::string z = "\"stage\": " + std::to_string(p.stage) + ", \"sub_group_size\": 3000," +
                  " \"offload_optimizer\": {\"device\": \"" + p.offload +
                  "\", \"pin_memory\": false";
  if (p.ratio != 1.0) z += ", \"ratio\": " + std::to_string(p.ratio);
  z += "}, \"overlap_comm\": " + std::string(p.overlap ? "true" : "false") +
       ", \"reduce_bucket_size\": 40000";
  if (p.stage == 3) {
    z += ", \"stage3_param_persistence_threshold\": 200, \"offload_param\": {\"device\": \"" +
         std::string(p.param) + "\", \"pin_memory\": false}";
  }
  return z;
}

struct RunResult {
  std::vector<std::vector<float>> masters;
  std::vector<float> losses;
};

RunResult RunPlacement(const Placement& p, const testing::TokenData& data, int steps) {
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), p.dtype, p.tied, p.checkpointing);
  Config config = testing::MakeConfig(data.batch, 1, ZeroKeys(p), DtypeKeys(p.dtype));
  EngineInit init;
  init.init_param = testing::TestInit(7);
  Result<std::unique_ptr<Engine>> engine = Engine::Initialize(*model, config, *comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk());
  if (!engine.ok()) return {};
  RunResult r;
  r.masters = testing::TrainAndGather(**engine, data, steps, 1, &r.losses);
  return r;
}

class EngineSameMathTest : public ::testing::TestWithParam<Placement> {};

TEST_P(EngineSameMathTest, EqualsStageZeroWithNothingOffloadedBitwise) {
  const Placement p = GetParam();
  const testing::TokenData data = testing::RandomTokens(11, 3, 2, 16, 256);
  // The stage-0 baseline of each (dtype, tied), computed once for the suite.
  static std::map<std::pair<DType, bool>, RunResult> baselines;
  auto key = std::make_pair(p.dtype, p.tied);
  if (!baselines.contains(key)) {
    Placement b{0, "none", p.dtype};
    b.tied = p.tied;
    baselines[key] = RunPlacement(b, data, 3);
  }
  const RunResult& base = baselines[key];
  const RunResult got = RunPlacement(p, data, 3);
  ASSERT_EQ(base.masters.size(), got.masters.size());
  for (size_t i = 0; i < base.masters.size(); ++i) {
    ASSERT_EQ(base.masters[i].size(), got.masters[i].size());
    EXPECT_EQ(std::memcmp(base.masters[i].data(), got.masters[i].data(),
                          base.masters[i].size() * sizeof(float)),
              0)
        << "parameter " << i;
  }
  EXPECT_EQ(base.losses, got.losses);
  ASSERT_EQ(got.losses.size(), 3u);
}

Placement P3(const char* opt, const char* param, DType d, bool overlap = true, bool tied = false,
             bool ckpt = false) {
  Placement p{3, opt, d};
  p.param = param;
  p.overlap = overlap;
  p.tied = tied;
  p.checkpointing = ckpt;
  return p;
}

Placement P2(const char* opt, DType d, bool overlap, bool tied = false) {
  Placement p{2, opt, d};
  p.overlap = overlap;
  p.tied = tied;
  return p;
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;

INSTANTIATE_TEST_SUITE_P(
    Placements, EngineSameMathTest,
    ::testing::Values(Placement{1, "none", kF32}, Placement{2, "none", kF32},
                      Placement{1, "cpu", kF32}, Placement{2, "cpu", kF32},
                      Placement{2, "none", kBf16}, Placement{1, "cpu", kBf16},
                      Placement{2, "cpu", kBf16}, P2("none", kF32, true), P2("cpu", kBf16, true),
                      P2("cpu", kF32, true, /*tied=*/true),
                      // Stage 3: optimizer none/cpu x parameters none/cpu x fp32/bf16, overlap on
                      // (the stage-3 default) and off, tied embeddings, activation checkpointing.
                      P3("none", "none", kF32), P3("cpu", "none", kF32), P3("none", "cpu", kF32),
                      P3("cpu", "cpu", kF32), P3("none", "none", kBf16), P3("cpu", "none", kBf16),
                      P3("none", "cpu", kBf16), P3("cpu", "cpu", kBf16),
                      P3("cpu", "cpu", kF32, false), P3("none", "none", kBf16, false),
                      P3("cpu", "cpu", kF32, true, /*tied=*/true),
                      P3("none", "none", kBf16, false, /*tied=*/true),
                      P3("cpu", "cpu", kF32, true, false, /*ckpt=*/true),
                      P3("none", "cpu", kBf16, false, /*tied=*/true, /*ckpt=*/true)),
    PlacementName);

TEST(EngineTest, RefusesPlacementsThatCannotWorkNamingTheKey) {
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  // Parameters on NVMe need the optimizer on the host (it writes the updated shards from there).
  Config nvme = testing::MakeConfig(
      2, 1, "\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}");
  EXPECT_THAT(Engine::Initialize(*model, nvme, *comm, *device, init).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("needs offload_optimizer.device cpu or nvme")));
  Config bf16 = testing::MakeConfig(2, 1, "\"stage\": 1", "\"bf16\": {\"enabled\": true},");
  EXPECT_THAT(Engine::Initialize(*model, bf16, *comm, *device, init).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("trains in bf16")));
}

TEST(EngineTest, DeviceMemoryIsABudgetNamingWhatDidNotFit) {
  auto device = testing::MakeHostDevice(uint64_t{1} << 20);  // 1 MiB: the tiny model's 4 MiB won't
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  EngineInit init;
  init.init_param = testing::TestInit(1);
  Config config = testing::MakeConfig(2, 1, "\"stage\": 1");
  // The fit check refuses before anything is allocated, naming the tier.
  EXPECT_THAT(Engine::Initialize(*model, config, *comm, *device, init).status(),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("tier device needs")));
}

}  // namespace
}  // namespace strata
