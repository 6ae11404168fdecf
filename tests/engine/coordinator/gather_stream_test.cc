// Stage 3's gathers on their own stream, and the parameter traffic in the step breakdown: the
// gathers show up on the trace's "stream gather" track (not the compute stream's), and the
// breakdown's H2D and NVMe bytes are the layout's shard bytes times the times they were moved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/engine/coordinator/flag_lm.h"
#include "tests/engine/trace/trace_json.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::PrefetchOutcome;
using ::strata::testing::PrefetchRun;
using ::strata::testing::SameBits;
using ::strata::testing::TrainPrefetch;

TEST(ParamCoordinatorStreamTest, GathersRunOnTheGatherStreamAndChangeNoBits) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(21, 6, 2, 16, 256);
  const std::string path =
      ::testing::TempDir() + "strata_gather_stream_" + std::to_string(::getpid()) + ".json";
  PrefetchRun off{.param = "cpu", .tied = true};
  const PrefetchOutcome base = TrainPrefetch(*comm, off, data);
  ASSERT_THAT(base.status, IsOk());
  PrefetchRun on = off;
  on.bucket = 60000;
  on.extra = "\"strata\": {\"trace_path\": \"" + path + "\"}, ";
  const PrefetchOutcome got = TrainPrefetch(*comm, on, data);  // the trace is written at the end
  ASSERT_THAT(got.status, IsOk());
  EXPECT_TRUE(SameBits(base.masters, got.masters));
  EXPECT_GT(got.stats.prefetch_hits, 0u);

  const testing::ParsedTrace trace = testing::ParseTrace(path);
  int gather_tid = -1, compute_tid = -1;
  for (const auto& [tid, name] : trace.tracks) {
    if (name == "stream gather") gather_tid = tid;
    if (name == "stream compute") compute_tid = tid;
  }
  ASSERT_NE(gather_tid, -1) << "no \"stream gather\" track in " << path;
  EXPECT_NE(gather_tid, compute_tid);
  // One span per gather of a non-persistent parameter: each at least once a step (a parameter
  // kept by the reuse distance is gathered once for its forward and backward).
  size_t non_persistent = 0;
  for (bool p : got.persistent) non_persistent += p ? 0 : 1;
  size_t gathers = 0;
  for (const nlohmann::json& s : trace.spans) {
    if (s.at("name") == "gather") {
      EXPECT_EQ(s.at("tid").get<int>(), gather_tid) << "a gather span off the gather stream";
      ++gathers;
    }
  }
  EXPECT_GE(gathers, non_persistent * static_cast<size_t>(on.steps));
  std::filesystem::remove(path);
}

// Note [Module spans on the compute stream]: with a trace, every module that owns parameters has
// one span per forward and one per backward on the compute stream's track, recorded by the stream
// itself: they never overlap (the stream runs one kernel at a time), each step's forward spans
// all come before its backward spans, and the modules are those the model's parameters name.
TEST(ParamCoordinatorStreamTest, EachModuleHasAForwardAndABackwardSpanOnTheComputeStream) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(23, 6, 2, 16, 256);
  const std::string path =
      ::testing::TempDir() + "strata_module_spans_" + std::to_string(::getpid()) + ".json";
  PrefetchRun run{.param = "cpu", .bucket = 60000};
  run.extra = "\"strata\": {\"trace_path\": \"" + path + "\"}, ";
  ASSERT_THAT(testing::TrainPrefetch(*comm, run, data).status, IsOk());

  // The modules owning parameters, from the model's parameter names ("<module>.<local>").
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  std::set<std::string> modules;
  for (const nn::Parameter* p : model->NamedParameters()) {
    modules.insert(p->name().substr(0, p->name().rfind('.')));
  }
  ASSERT_GT(modules.size(), 4u);

  const testing::ParsedTrace trace = testing::ParseTrace(path);
  int compute_tid = -1;
  for (const auto& [tid, name] : trace.tracks) {
    if (name == "stream compute") compute_tid = tid;
  }
  ASSERT_NE(compute_tid, -1) << "no \"stream compute\" track in " << path;
  struct Span {
    double begin, end;
    std::string name, phase;
  };
  std::vector<Span> spans;
  for (const nlohmann::json& s : trace.spans) {
    const std::string cat = s.at("cat").get<std::string>();
    if (cat != "forward" && cat != "backward") continue;
    EXPECT_EQ(s.at("tid").get<int>(), compute_tid) << "a module span off the compute stream";
    const double ts = s.at("ts").get<double>();
    spans.push_back({ts, ts + s.at("dur").get<double>(), s.at("name").get<std::string>(), cat});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const size_t m = modules.size();
  ASSERT_EQ(spans.size(), 2 * m * static_cast<size_t>(run.steps));
  for (size_t k = 0; k < spans.size(); ++k) {
    if (k > 0) {
      EXPECT_LE(spans[k - 1].end, spans[k].begin) << "overlapping spans at " << k;
    }
    EXPECT_LE(spans[k].begin, spans[k].end);
    // Per step: the m forward spans, then the m backward spans.
    EXPECT_EQ(spans[k].phase, (k / m) % 2 == 0 ? "forward" : "backward") << k;
  }
  for (size_t first = 0; first < spans.size(); first += m) {
    std::set<std::string> names;
    for (size_t k = first; k < first + m; ++k) names.insert(spans[k].name);
    EXPECT_EQ(names, modules) << "the " << spans[first].phase << " at span " << first;
  }
  std::filesystem::remove(path);
}

// Without prefetch (nothing kept, nothing gathered ahead) every parameter is fetched at each use:
// a non-persistent one at its module's forward and backward, a persistent one once, at the end of
// the step (RegatherPersistent); the untied embedding at one rank as the rows its forward
// touches, not for its backward (Note [Rows only]). Step 1 also carries the gathers of
// initialisation, so the check starts at step 2. With `forward_only`, the forward's share
// (StepBreakdown::forward_h2d_bytes): each non-persistent parameter once.
uint64_t ExpectedH2dBytesPerStep(const PrefetchOutcome& o, size_t step, bool forward_only = false) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < o.shard_bytes.size(); ++i) {
    if (i == o.embedding) {
      bytes += o.embedding_rows[step] * o.embedding_row_bytes;
    } else if (!forward_only || !o.persistent[i]) {
      bytes += o.shard_bytes[i] * (o.persistent[i] || forward_only ? 1 : 2);
    }
  }
  return bytes;
}

TEST(ParamCoordinatorTrafficTest, H2dBytesAreShardBytesTimesFetches) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(23, 4, 2, 16, 256);
  PrefetchRun run{.param = "cpu"};  // untied, no checkpointing: one module per parameter
  const PrefetchOutcome got = TrainPrefetch(*comm, run, data);
  ASSERT_THAT(got.status, IsOk());
  ASSERT_EQ(got.breakdowns.size(), 3u);
  ASSERT_NE(got.embedding, SIZE_MAX);
  ASSERT_EQ(got.embedding_rows.size(), 3u);
  ASSERT_GT(got.embedding_rows[1], 0u);
  for (size_t k = 1; k < got.breakdowns.size(); ++k) {
    EXPECT_EQ(got.breakdowns[k].h2d_bytes, ExpectedH2dBytesPerStep(got, k)) << "step " << k + 1;
    EXPECT_EQ(got.breakdowns[k].forward_h2d_bytes,
              ExpectedH2dBytesPerStep(got, k, /*forward_only=*/true))
        << "step " << k + 1;
    EXPECT_GT(got.breakdowns[k].h2d_ms, 0.0) << "step " << k + 1;
    EXPECT_EQ(got.breakdowns[k].nvme_read_bytes, 0u);
  }
  // Prefetching moves no more (a parameter kept by the reuse distance is not fetched again).
  run.bucket = 60000;
  const PrefetchOutcome ahead = TrainPrefetch(*comm, run, data);
  ASSERT_THAT(ahead.status, IsOk());
  for (size_t k = 1; k < ahead.breakdowns.size(); ++k) {
    EXPECT_GT(ahead.breakdowns[k].h2d_bytes, 0u);
    EXPECT_LE(ahead.breakdowns[k].h2d_bytes, ExpectedH2dBytesPerStep(got, k)) << "step " << k + 1;
  }
}

// Note [Next fresh gather] in engine/zero/hooks/param_coordinator.cc: with settings like
// bench/overlap's (a bucket of about the largest module, max_live two buckets) the room rule alone
// released the last layer's parameters after their forward and gathered them again for the backward
// right after; now the parameters whose next use comes before any fresh gather stay, so a replayed
// step moves fewer bytes than one fetch per forward and per backward use.
TEST(ParamCoordinatorTrafficTest, TheLastLayerIsKeptAcrossTheTurnToBackward) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(29, 4, 2, 16, 256);
  PrefetchRun off{.param = "cpu"};
  const PrefetchOutcome base = TrainPrefetch(*comm, off, data);
  ASSERT_THAT(base.status, IsOk());
  // The tiny model's largest module is an MLP projection (49152 elements), lm_head 32768: at the
  // last down_proj's release the live elements (it and lm_head, gathered ahead) plus a bucket
  // pass max_live, as the last layer and lm_head did in the bench.
  ASSERT_EQ(base.largest_module_numel, 49152u);
  PrefetchRun on = off;
  on.bucket = 60000;
  on.max_live = 2 * on.bucket;
  on.reuse = 1000000000;
  const PrefetchOutcome got = TrainPrefetch(*comm, on, data);
  ASSERT_THAT(got.status, IsOk());
  ASSERT_EQ(got.breakdowns.size(), 3u);
  EXPECT_TRUE(SameBits(base.masters, got.masters));
  for (size_t k = 1; k < got.breakdowns.size(); ++k) {
    EXPECT_EQ(base.breakdowns[k].h2d_bytes, ExpectedH2dBytesPerStep(base, k)) << "step " << k + 1;
    // At least the last layer's down_proj (49152 fp32 elements, the module before lm_head)
    // crosses the link once a step instead of twice.
    const uint64_t expected = ExpectedH2dBytesPerStep(base, k);
    ASSERT_LE(got.breakdowns[k].h2d_bytes, expected) << "step " << k + 1;
    EXPECT_GE(expected - got.breakdowns[k].h2d_bytes, uint64_t{49152} * 4) << "step " << k + 1;
  }
}

TEST(ParamCoordinatorTrafficTest, NvmeBytesAreTheStoresReadsAndWriteBack) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(25, 4, 2, 16, 256);
  PrefetchRun run{.param = "nvme"};
  run.max_in_cpu = 0;  // every shard on NVMe
  const PrefetchOutcome got = TrainPrefetch(*comm, run, data);
  ASSERT_THAT(got.status, IsOk());
  uint64_t all_shards = 0;
  for (uint64_t b : got.shard_bytes) all_shards += b;
  for (size_t k = 1; k < got.breakdowns.size(); ++k) {
    const StepBreakdown& b = got.breakdowns[k];
    EXPECT_EQ(b.h2d_bytes, ExpectedH2dBytesPerStep(got, k)) << "step " << k + 1;
    // The step writes every shard back once.
    EXPECT_EQ(b.nvme_write_bytes, all_shards) << "step " << k + 1;
    // Every shard was rewritten by the previous step, so each is read at least once.
    EXPECT_GE(b.nvme_read_bytes, all_shards) << "step " << k + 1;
  }
}

}  // namespace
}  // namespace strata
