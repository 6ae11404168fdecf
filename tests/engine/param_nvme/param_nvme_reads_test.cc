// Reads in flight (issue #40): with its parameter shards on NVMe (max_in_cpu 0), a stage-3
// forward keeps the configured aio queue depth busy. The tiny Llama's shards are at most three
// 64 KiB pieces each, so one shard read at a time never fills a queue of eight; a decoder layer
// (the prefetch bucket) is twelve and more. The Chrome trace's aio spans on the parameter swap
// file say how many read pieces were in flight at once (max_reads_in_flight, Note [Reads in
// flight] in aio/aio_worker_trace.cc): during a forward that reads every shard, the most is the
// queue depth. The disk is made slow (every piece completes kPieceLatency after it was submitted,
// Note [A slow disk]), so the count says how the engine issues its reads, not how fast this
// machine's disk or an instrumented (ASan) build is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "aio/engine/io_engine.h"
#include "tests/engine/trace/trace_json.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;

constexpr int kQueueDepth = 8;
constexpr int kBlockBytes = 64 << 10;
constexpr std::chrono::microseconds kPieceLatency{2000};

// Note [A slow disk]
// The test is about how the engine issues its reads: whether a prefetch bucket's shards go to
// the aio queue together (they fill it) or one gather after another (one to three pieces at a
// time). What the trace counts also depends on how fast pieces complete against how fast the
// engine's thread issues them: under ASan the thread issued the bucket's seven shards slower
// than this disk (or the host's cache) completed them, and the queue reached 5, then 7, where
// the bucket's reads had gone out together. So the real engine runs behind a wrapper that hands
// back each completion no sooner than kPieceLatency after its piece was submitted: a disk slower
// than any build of the engine's thread, so the count is the engine's doing.
class SlowDisk final : public IoEngineWrapper {
 public:
  using IoEngineWrapper::IoEngineWrapper;
  Result<int> Submit(std::span<const IoRequest> requests) override {
    const auto now = Clock::now();
    for (const IoRequest& r : requests) submitted_[r.user_data] = now;
    return target().Submit(requests);
  }
  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override {
    const auto deadline = timeout_us < 0 ? Clock::time_point::max()
                                         : Clock::now() + std::chrono::microseconds(timeout_us);
    int n = 0;
    while (true) {
      STRATA_RETURN_IF_ERROR(Pull(0, 0));
      while (n < static_cast<int>(out.size()) && !held_.empty() &&
             held_.front().second <= Clock::now()) {
        out[static_cast<size_t>(n++)] = held_.front().first;
        held_.pop_front();
      }
      if (n >= min_complete || n == static_cast<int>(out.size())) return n;
      const auto now = Clock::now();
      if (now >= deadline) return n;
      if (!held_.empty()) {
        std::this_thread::sleep_until(std::min(held_.front().second, deadline));
      } else {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
        STRATA_RETURN_IF_ERROR(Pull(1, deadline == Clock::time_point::max() ? -1 : left.count()));
      }
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  // Moves the wrapped engine's completions into held_, each due kPieceLatency after its submit.
  Status Pull(int min_complete, int64_t timeout_us) {
    IoCompletion got[64];
    STRATA_ASSIGN_OR_RETURN(int k, target().Reap(got, min_complete, timeout_us));
    for (int j = 0; j < k; ++j) {
      const auto it = submitted_.find(got[j].user_data);
      const auto due = (it == submitted_.end() ? Clock::now() : it->second) + kPieceLatency;
      if (it != submitted_.end()) submitted_.erase(it);
      held_.emplace_back(got[j], std::max(due, held_.empty() ? due : held_.back().second));
    }
    return Status::Ok();
  }
  std::unordered_map<uint64_t, Clock::time_point> submitted_;
  std::deque<std::pair<IoCompletion, Clock::time_point>> held_;  // in due order
};

// Stage 3, every shard on NVMe; the swap buffers hold the whole model (the backward finds the
// forward's shards still there, so every read after the forward begins is the forward's); a
// prefetch bucket of about one decoder layer (196608 elements: 768 KiB, more than the queue's
// 8 x 64 KiB).
std::string Zero(const ScratchDir& dir) {
  return "\"stage\": 3, \"sub_group_size\": 100000, \"reduce_bucket_size\": 200000, "
         "\"stage3_param_persistence_threshold\": 200, \"stage3_prefetch_bucket_size\": 200000, "
         "\"stage3_max_live_parameters\": 400000, "
         "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false}, "
         "\"offload_param\": {\"device\": \"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
         dir.File("param_swap") +
         "\", \"buffer_count\": 2, \"buffer_size\": 1000000, \"max_in_cpu\": 0}";
}

TEST(ParamNvmeReadsTest, ForwardKeepsTheReadQueueFull) {
  ScratchDir dir;
  const std::string trace = dir.File("trace.json");
  auto comm = testing::MakeLocalComm();
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  const std::string extra = "\"strata\": {\"trace_path\": \"" + trace +
                            "\"}, \"aio\": {\"queue_depth\": " + std::to_string(kQueueDepth) +
                            ", \"block_size\": " + std::to_string(kBlockBytes) + "},";
  Config config = testing::MakeConfig(2, 1, Zero(dir), extra);
  config.aio.engine_factory =
      [](int,
         const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {  // Note [A slow disk]
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new SlowDisk(std::move(real)));
  };
  EngineInit init;
  init.init_param = testing::TestInit(3);
  const testing::TokenData data = testing::RandomTokens(5, 3, 2, 16, 256);
  {
    auto engine = Engine::Initialize(*model, config, *comm, *device, init);
    ASSERT_THAT(engine.status(), IsOk());
    // Step 1 records the module order, step 2 replays it; the deferred updates and the shards'
    // writes end before step 3, so its forward starts with the aio thread idle and reads every
    // shard from NVMe.
    testing::TrainAndGather(**engine, data, 2, 1);
    ASSERT_THAT((*engine)->Synchronize(), IsOk());
    testing::TrainAndGather(**engine, data, 1, 1, nullptr, 2);
    ASSERT_THAT((*engine)->Synchronize(), IsOk());
    ASSERT_THAT((*engine)->FlushTrace(), IsOk());
  }
  const testing::ParsedTrace t = testing::ParseTrace(trace);
  std::vector<double> forwards;
  for (const nlohmann::json& e : t.spans) {
    if (e.at("name") == "forward") forwards.push_back(e.at("ts").get<double>());
  }
  ASSERT_EQ(forwards.size(), 3u);
  const double begin = *std::max_element(forwards.begin(), forwards.end());
  // The parameter file's read batches from step 3's forward on (the backward reads nothing: the
  // buffers still hold the forward's shards). Batches of the persistent norms' 512-byte shards,
  // read through the page cache at their first use after a step, hold no piece: left out.
  std::vector<nlohmann::json> reads;
  for (const nlohmann::json& e : t.spans) {
    if (e.at("cat") != "aio" || e.at("ts").get<double>() + e.at("dur").get<double>() < begin) {
      continue;
    }
    const nlohmann::json& a = e.at("args");
    if (a.at("file").get<std::string>().find("param_swap") == std::string::npos) continue;
    ASSERT_GE(e.at("ts").get<double>(), begin)
        << "an aio span on the parameter file was open when the forward began: " << e.dump();
    EXPECT_EQ(a.at("queue_depth").get<int>(), kQueueDepth) << e.dump();
    if (a.at("bytes_read").get<double>() >= 4096) reads.push_back(e);
  }
  std::sort(reads.begin(), reads.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("ts").get<double>() < b.at("ts").get<double>();
  });
  int max_reads = 0;
  double bytes_read = 0;
  for (const nlohmann::json& e : reads) {
    max_reads = std::max(max_reads, e.at("args").at("max_reads_in_flight").get<int>());
    bytes_read += e.at("args").at("bytes_read").get<double>();
  }
  // Every shard but the persistent norms' read once: ~3.4 MB, far more than the queue holds.
  EXPECT_GT(bytes_read, 3e6);
  EXPECT_EQ(max_reads, kQueueDepth) << "the forward's parameter reads never filled the queue";
  // The first gather (the embedding) reads alone: nothing is ahead of the pass's first module.
  // The first prefetch bucket follows, layer 0's seven shards (768 KiB, 12 pieces), read
  // together (Note [A bucket's reads together] in engine/zero/hooks/param_coordinator.cc): the
  // queue fills before all of them have been read. (Read one gather after another, they ran one to
  // three pieces at a time and the queue first filled after the whole bucket.) A batch may split
  // where the engine's thread was slower than the disk, so only the bytes before the queue first
  // filled are bounded.
  std::string seen;  // for the failure messages
  for (const nlohmann::json& e : reads) seen += e.at("args").dump() + "\n";
  constexpr double kFirstBucketBytes = 786432;
  double before_full = 0;
  bool filled = false;
  for (size_t k = 0; k < reads.size() && !filled; ++k) {  // the bucket's may join the first's
    filled = reads[k].at("args").at("max_reads_in_flight").get<int>() == kQueueDepth;
    if (!filled && k > 0) before_full += reads[k].at("args").at("bytes_read").get<double>();
  }
  EXPECT_TRUE(filled) << seen;
  EXPECT_LT(before_full, kFirstBucketBytes)
      << "the first prefetch bucket was read before the queue filled:\n"
      << seen;
}

}  // namespace
}  // namespace strata
