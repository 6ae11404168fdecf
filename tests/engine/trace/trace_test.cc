// The Chrome trace writer: spans from several threads land on named tracks, nest as recorded, and
// the file is JSON trace events; a disabled tracer writes nothing and records nothing.
#include "core/trace.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;
using Json = nlohmann::json;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return Json::parse(in);  // throws (and fails the test) on malformed JSON
}

// tid -> thread_name, and the "X" events, of a parsed trace.
struct Parsed {
  std::map<int, std::string> tracks;
  std::vector<Json> spans;
  std::string process;
};

Parsed Parse(const Json& doc) {
  Parsed p;
  for (const Json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      p.tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else if (e.at("ph") == "M" && e.at("name") == "process_name") {
      p.process = e.at("args").at("name").get<std::string>();
    } else if (e.at("ph") == "X") {
      p.spans.push_back(e);
    }
  }
  return p;
}

TEST(TracerTest, SpansFromSeveralThreadsLandOnTheirNamedTracksAndNest) {
  ScratchDir dir;
  const std::string path = dir.File("sub/trace.json");  // the directory is made
  Tracer tracer(path, /*pid=*/2);
  ASSERT_TRUE(tracer.enabled());
  constexpr int kThreads = 4, kSpans = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tracer, t] {
      tracer.NameThisThread("worker " + std::to_string(t));
      for (int i = 0; i < kSpans; ++i) {
        TraceSpan outer(&tracer, "outer", "test");
        outer.AddArg("i", i);
        { TraceSpan inner(&tracer, "inner", "test"); }
      }
    });
  }
  for (auto& th : threads) th.join();
  const int stream = tracer.Track("stream compute");
  EXPECT_EQ(tracer.Track("stream compute"), stream) << "the same name, the same track";
  { TraceSpan on_stream(&tracer, stream, "kernel", "device"); }
  EXPECT_EQ(tracer.event_count(), size_t{kThreads * kSpans * 2 + 1});
  ASSERT_THAT(tracer.Flush(), IsOk());

  const Parsed p = Parse(ReadJson(path));
  EXPECT_EQ(p.process, "rank 2");
  ASSERT_EQ(p.spans.size(), size_t{kThreads * kSpans * 2 + 1});
  std::set<std::string> names;
  for (const auto& [tid, name] : p.tracks) names.insert(name);
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(names.count("worker " + std::to_string(t)));
  EXPECT_TRUE(names.count("stream compute"));

  // Per track: kSpans outer spans, each followed by its inner span inside it.
  std::map<int, std::vector<Json>> by_track;
  for (const Json& e : p.spans) {
    EXPECT_EQ(e.at("pid").get<int>(), 2);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    by_track[e.at("tid").get<int>()].push_back(e);
  }
  int worker_tracks = 0;
  for (const auto& [tid, events] : by_track) {
    ASSERT_TRUE(p.tracks.count(tid)) << "track " << tid << " has no thread_name";
    const std::string& track = p.tracks.at(tid);
    if (track == "stream compute") {
      ASSERT_EQ(events.size(), 1u);
      EXPECT_EQ(events[0].at("name"), "kernel");
      EXPECT_EQ(events[0].at("cat"), "device");
      continue;
    }
    ++worker_tracks;
    ASSERT_EQ(events.size(), size_t{2 * kSpans}) << track;
    // Recorded at their ends: inner before outer.
    for (int i = 0; i < kSpans; ++i) {
      const Json& inner = events[static_cast<size_t>(2 * i)];
      const Json& outer = events[static_cast<size_t>(2 * i + 1)];
      ASSERT_EQ(inner.at("name"), "inner");
      ASSERT_EQ(outer.at("name"), "outer");
      EXPECT_EQ(outer.at("args").at("i").get<int>(), i);
      const double ot = outer.at("ts"), od = outer.at("dur");
      const double it = inner.at("ts"), id = inner.at("dur");
      EXPECT_LE(ot, it);
      EXPECT_LE(it + id, ot + od + 1e-3);
    }
  }
  EXPECT_EQ(worker_tracks, kThreads);
}

TEST(TracerTest, DisabledTracerRecordsAndWritesNothing) {
  ScratchDir dir;
  {
    Tracer tracer("");
    EXPECT_FALSE(tracer.enabled());
    tracer.NameThisThread("main");
    EXPECT_EQ(tracer.Track("stream"), 0);
    {
      TraceSpan span(&tracer, "step");
      span.AddArg("bytes", 1);
    }
    TraceSpan null_span(nullptr, "no tracer");
    null_span.End();
    EXPECT_EQ(tracer.event_count(), 0u);
    EXPECT_THAT(tracer.Flush(), IsOk());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(TracerTest, WritesAtDestructionWhatWasNotFlushed) {
  ScratchDir dir;
  const std::string path = dir.File("end.json");
  {
    Tracer tracer(path);
    TraceSpan span(&tracer, "only");
  }
  const Parsed p = Parse(ReadJson(path));
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_EQ(p.spans[0].at("name"), "only");
}

TEST(TracerTest, FlushRewritesTheFileWithEverythingSoFar) {
  ScratchDir dir;
  const std::string path = dir.File("t.json");
  Tracer tracer(path);
  { TraceSpan a(&tracer, "a"); }
  ASSERT_THAT(tracer.Flush(), IsOk());
  EXPECT_EQ(Parse(ReadJson(path)).spans.size(), 1u);
  { TraceSpan b(&tracer, "b"); }
  ASSERT_THAT(tracer.Flush(), IsOk());
  EXPECT_EQ(Parse(ReadJson(path)).spans.size(), 2u);
}

TEST(TracerTest, FlushToAnUnwritablePathIsIoErrorNamingIt) {
  ScratchDir dir;
  const std::string file = dir.File("plain-file");
  std::ofstream(file) << "x";
  Tracer tracer(file + "/trace.json");  // a directory under a regular file cannot be made
  { TraceSpan a(&tracer, "a"); }
  EXPECT_THAT(tracer.Flush(), StatusIs(StatusCode::kIoError, HasSubstr("plain-file")));
}

}  // namespace
}  // namespace strata
