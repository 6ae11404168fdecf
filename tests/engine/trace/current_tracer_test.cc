// The process-wide current tracer (core/trace.h) and the spans lower layers record into it: an
// AioHandle's threads record one span per batch on an "aio worker <i>" track (bytes, file), the
// CPU optimizer one span per worker chunk on "adam worker <slot>" tracks; with no current tracer
// they record nothing.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "core/trace.h"
#include "cpu_adam/cpu_optimizer.h"
#include "tests/engine/trace/trace_json.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::testing::StartsWith;

TEST(CurrentTracerTest, InstalledWhenEnabledAndUninstalledByItsDestructor) {
  ASSERT_EQ(CurrentTracer(), nullptr);
  ScratchDir dir;
  {
    Tracer off("");
    SetCurrentTracer(&off);
    EXPECT_EQ(CurrentTracer(), nullptr) << "a disabled tracer is not installed";
    Tracer on(dir.File("t.json"));
    SetCurrentTracer(&on);
    EXPECT_EQ(CurrentTracer(), &on);
    { Tracer other(dir.File("u.json")); }
    EXPECT_EQ(CurrentTracer(), &on) << "another tracer's destruction leaves it installed";
  }
  EXPECT_EQ(CurrentTracer(), nullptr);
}

TEST(CurrentTracerTest, AioThreadsRecordOneSpanPerBatchOnTheirTracks) {
  ScratchDir dir;
  const std::string file = dir.File("data.bin");
  AioOptions o;
  o.thread_count = 2;
  o.block_size = 64 << 10;
  auto aio = AioHandle::Create(o);
  ASSERT_THAT(aio.status(), IsOk());
  auto buf = AlignedBuffer::Allocate(1 << 20);
  ASSERT_THAT(buf.status(), IsOk());
  std::memset(buf->data(), 7, buf->size());
  // Off: nothing recorded anywhere (there is no tracer to record into).
  ASSERT_THAT((*aio)->Pwrite(file, buf->data(), buf->size(), 0).status(), IsOk());

  const std::string path = dir.File("trace.json");
  {
    Tracer tracer(path);
    SetCurrentTracer(&tracer);
    ASSERT_THAT((*aio)->Pwrite(file, buf->data(), buf->size(), 0).status(), IsOk());
    ASSERT_THAT((*aio)->Pread(file, buf->data(), buf->size(), 0).status(), IsOk());
    SetCurrentTracer(nullptr);
    ASSERT_THAT((*aio)->Pread(file, buf->data(), buf->size(), 0).status(), IsOk());
    ASSERT_THAT(tracer.Flush(), IsOk());
  }
  const testing::ParsedTrace t = testing::ParseTrace(path);
  uint64_t read = 0, written = 0;
  std::map<std::string, int> per_track;
  for (const nlohmann::json& e : t.spans) {
    ASSERT_EQ(e.at("cat"), "aio");
    const std::string track = t.tracks.at(e.at("tid").get<int>());
    EXPECT_THAT(track, StartsWith("aio worker "));
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_EQ(e.at("args").at("file"), file);
    read += e.at("args").at("bytes_read").get<uint64_t>();
    written += e.at("args").at("bytes_written").get<uint64_t>();
    ++per_track[track];
  }
  // Each request is cut into one segment per thread: both threads took part, each recording
  // its share of the traced write and read (and nothing of the untraced ones).
  EXPECT_EQ(per_track.size(), 2u);
  EXPECT_EQ(written, buf->size());
  EXPECT_EQ(read, buf->size());
}

// Note [Reads in flight] (aio/aio_worker_trace.cc): a batch's span says how deep its reads ran. One
// thread, a queue of 4: a read of 16 pieces holds all four slots (the time-weighted mean lies in
// (0, 4]); reads waited for one at a time hold one; a write holds none.
TEST(CurrentTracerTest, AioSpansSayHowManyReadPiecesWereInFlight) {
  ScratchDir dir;
  const std::string file = dir.File("data.bin");
  constexpr size_t kPiece = 4096, kPieces = 16;
  AioOptions o;
  o.queue_depth = 4;
  o.block_size = kPiece;
  o.allow_buffered = true;
  auto aio = AioHandle::Create(o);
  ASSERT_THAT(aio.status(), IsOk());
  auto buf = AlignedBuffer::Allocate(kPiece * kPieces);
  ASSERT_THAT(buf.status(), IsOk());
  std::memset(buf->data(), 3, buf->size());
  const std::string path = dir.File("trace.json");
  {
    Tracer tracer(path);
    SetCurrentTracer(&tracer);
    ASSERT_THAT((*aio)->Pwrite(file, buf->data(), buf->size(), 0).status(), IsOk());
    ASSERT_THAT((*aio)->Pread(file, buf->data(), buf->size(), 0).status(), IsOk());
    ASSERT_THAT((*aio)->Pread(file, buf->data(), kPiece, 0).status(), IsOk());
    SetCurrentTracer(nullptr);
    ASSERT_THAT(tracer.Flush(), IsOk());
  }
  const testing::ParsedTrace t = testing::ParseTrace(path);
  ASSERT_EQ(t.spans.size(), 3u) << "one batch per request (each waited for)";
  std::vector<nlohmann::json> spans = t.spans;
  std::sort(spans.begin(), spans.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("ts").get<double>() < b.at("ts").get<double>();
  });
  const int expect_max[] = {0, 4, 1};
  for (size_t k = 0; k < spans.size(); ++k) {
    const nlohmann::json& a = spans[k].at("args");
    EXPECT_EQ(a.at("queue_depth").get<int>(), 4) << spans[k].dump();
    EXPECT_EQ(a.at("max_reads_in_flight").get<int>(), expect_max[k]) << spans[k].dump();
    const double mean = a.at("mean_reads_in_flight").get<double>();
    EXPECT_GE(mean, 0.0) << spans[k].dump();
    EXPECT_LE(mean, expect_max[k]) << spans[k].dump();
    if (expect_max[k] == 0) {
      EXPECT_EQ(mean, 0.0) << spans[k].dump();
    }
  }
  EXPECT_EQ(spans[0].at("name"), "aio write");
  EXPECT_EQ(spans[1].at("name"), "aio read");
}

TEST(CurrentTracerTest, CpuOptimizerRecordsOneSpanPerChunkOnAdamWorkerTracks) {
  constexpr size_t kTile = 4096, kTiles = 16, kNumel = kTile * kTiles - 100;
  CpuOptimizerOptions co;
  co.tile_numel = kTile;
  co.num_threads = 2;
  auto opt = CpuOptimizer::Create(OptimizerKind::kAdam, co);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> p(kNumel, 1.0f), g(kNumel, 0.5f), m(kNumel), v(kNumel);
  StepTensors st{kNumel, p.data(), g.data(), DType::kFloat32, m.data(), v.data()};
  const Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
  ASSERT_THAT(opt->StepAt(hp, 1, st), IsOk());  // off: nothing to record into

  ScratchDir dir;
  const std::string path = dir.File("trace.json");
  {
    Tracer tracer(path);
    SetCurrentTracer(&tracer);
    ASSERT_THAT(opt->StepAt(hp, 2, st), IsOk());
    SetCurrentTracer(nullptr);
    ASSERT_THAT(tracer.Flush(), IsOk());
  }
  const testing::ParsedTrace t = testing::ParseTrace(path);
  double elements = 0, tiles = 0;
  for (const nlohmann::json& e : t.spans) {
    EXPECT_EQ(e.at("name"), "adam chunk");
    EXPECT_EQ(e.at("cat"), "adam");
    EXPECT_THAT(t.tracks.at(e.at("tid").get<int>()), StartsWith("adam worker "));
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    elements += e.at("args").at("elements").get<double>();
    tiles += e.at("args").at("tiles").get<double>();
  }
  EXPECT_EQ(elements, double{kNumel}) << "the chunks cover the step once";
  EXPECT_EQ(tiles, double{kTiles});
}

}  // namespace
}  // namespace strata
