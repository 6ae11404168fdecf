// A traced engine step with the optimizer on NVMe: the Chrome trace has thread tracks for the aio
// workers and the Adam workers, spans with non-negative durations, and aio spans overlapping the
// optimizer step in time (the swapper reads ahead while Adam runs) — the overlap made visible.
// An engine without strata.trace_path installs no tracer.
#include <algorithm>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "tests/engine/trace/trace_json.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;

std::string NvmeZero(const std::string& swap) {
  // Sub-groups of 20000 elements: a few per step, pipelined.
  return "\"stage\": 2, \"sub_group_size\": 20000, \"offload_optimizer\": {\"device\": \"nvme\", "
         "\"nvme_path\": \"" +
         swap +
         "\", \"pin_memory\": false, \"buffer_count\": 3, \"pipeline_read\": true, "
         "\"pipeline_write\": true}";
}

bool Overlap(const nlohmann::json& a, const nlohmann::json& b) {
  const double a0 = a.at("ts"), a1 = a0 + a.at("dur").get<double>();
  const double b0 = b.at("ts"), b1 = b0 + b.at("dur").get<double>();
  return a0 < b1 && b0 < a1;
}

TEST(EngineTraceTracksTest, NvmeStepHasAioAndAdamWorkerTracksOverlappingTheOptimizer) {
  ScratchDir dir;
  const std::string trace = dir.File("trace.json");
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  Config config = testing::MakeConfig(
      2, 1, NvmeZero(dir.File("swap")),
      "\"strata\": {\"trace_path\": \"" + trace + "\"}, \"aio\": {\"thread_count\": 2},");
  EngineInit init;
  init.init_param = testing::TestInit(3);
  const testing::TokenData data = testing::RandomTokens(3, 2, 2, 16, 256);
  {
    auto engine = Engine::Initialize(*model, config, *comm, *device, init);
    ASSERT_THAT(engine.status(), IsOk());
    EXPECT_NE(CurrentTracer(), nullptr) << "strata.trace_path installs the engine's tracer";
    testing::TrainAndGather(**engine, data, 2, 1);
    ASSERT_THAT((*engine)->FlushTrace(), IsOk());
  }
  EXPECT_EQ(CurrentTracer(), nullptr) << "the engine's tracer uninstalls itself";

  const testing::ParsedTrace t = testing::ParseTrace(trace);
  std::set<int> aio_tracks, adam_tracks, d2h_tracks;
  for (const auto& [tid, name] : t.tracks) {
    if (name.starts_with("aio worker ")) aio_tracks.insert(tid);
    if (name.starts_with("adam worker ")) adam_tracks.insert(tid);
    if (name == "stream reduce d2h") d2h_tracks.insert(tid);
  }
  EXPECT_FALSE(d2h_tracks.empty()) << "no \"stream reduce d2h\" track (gradients to host)";
  EXPECT_FALSE(aio_tracks.empty()) << "no aio worker track";
  EXPECT_FALSE(adam_tracks.empty()) << "no adam worker track";

  std::vector<nlohmann::json> optimizer, aio, adam;
  double d2h_bytes = 0;
  size_t d2h_spans = 0;
  for (const nlohmann::json& e : t.spans) {
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
    const int tid = e.at("tid");
    if (e.at("name") == "optimizer step (nvme)") optimizer.push_back(e);
    if (aio_tracks.contains(tid)) aio.push_back(e);
    if (adam_tracks.contains(tid)) adam.push_back(e);
    if (d2h_tracks.contains(tid)) {  // one span per gradient copy, fp32 elements
      EXPECT_EQ(e.at("name"), "gradient d2h");
      const double bytes = e.at("args").at("bytes").get<double>();
      EXPECT_GT(bytes, 0.0);
      EXPECT_EQ(static_cast<uint64_t>(bytes) % sizeof(float), 0u) << e.dump();
      d2h_bytes += bytes;
      ++d2h_spans;
    }
  }
  EXPECT_GE(d2h_spans, 2u) << "gradient copies in both steps";
  EXPECT_GT(d2h_bytes, 0.0);
  ASSERT_EQ(optimizer.size(), 2u) << "one optimizer span per step";
  ASSERT_FALSE(aio.empty());
  ASSERT_FALSE(adam.empty());
  for (const nlohmann::json& e : aio) {
    EXPECT_THAT(e.at("args").at("file").get<std::string>(), ::testing::HasSubstr(".swap"));
  }
  // Per step: some aio span and some Adam chunk lie (partly) inside the optimizer span.
  for (const nlohmann::json& step : optimizer) {
    EXPECT_TRUE(
        std::any_of(aio.begin(), aio.end(), [&](const auto& e) { return Overlap(e, step); }))
        << "no aio span overlaps " << step.dump();
    EXPECT_TRUE(
        std::any_of(adam.begin(), adam.end(), [&](const auto& e) { return Overlap(e, step); }))
        << "no adam chunk overlaps " << step.dump();
  }
}

TEST(EngineTraceTracksTest, UntracedEngineInstallsNoTracer) {
  ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  Config config = testing::MakeConfig(2, 1, NvmeZero(dir.File("swap")));
  EngineInit init;
  init.init_param = testing::TestInit(3);
  auto engine = Engine::Initialize(*model, config, *comm, *device, init);
  ASSERT_THAT(engine.status(), IsOk());
  EXPECT_EQ(CurrentTracer(), nullptr);
}

}  // namespace
}  // namespace strata
