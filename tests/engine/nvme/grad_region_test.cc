// GradRegion (engine/nvme/grad_region.h): the fp32 gradient partition on NVMe. Accumulated
// gradients read back bit for bit what a host array given the same adds holds; the norm and the
// overflow check taken as the gradients are written equal a double loop in the order of Note
// [Squared-norm order]; faults on the region's I/O name the chunk, file and offset; a corrupted
// block is DataLoss by its checksum.
#include "engine/nvme/grad_region.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::FaultPlan;
using ::strata::testing::FaultyEngine;
using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kGradFile[] = "strata-grad-rank0.swap";
constexpr size_t kChunk = 8192;               // elements: 2 norm chunks
constexpr size_t kNumel = 5 * kChunk + 3001;  // the last chunk short
constexpr size_t kNormChunk = 4096;           // Note [Squared-norm order]

struct Rig {
  std::unique_ptr<AioHandle> aio;
  std::unique_ptr<GradRegion> region;
};

Rig MakeRig(const ScratchDir& dir, size_t buffers, FaultPlan plan = {}) {
  Rig r;
  AioOptions ao;
  ao.block_size = 64 << 10;
  ao.engine_factory = [plan](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new FaultyEngine(std::move(real), plan));
  };
  r.aio = std::move(AioHandle::Create(ao)).value();
  GradRegionOptions o;
  o.nvme_paths = {dir.path().string()};
  o.chunk_numel = kChunk;
  o.buffer_count = buffers;
  o.pin_memory = false;
  auto region = GradRegion::Create(kNumel, o, r.aio.get());
  EXPECT_THAT(region.status(), IsOk());
  if (region.ok()) r.region = std::move(region).value();
  return r;
}

// A backward pass's adds: "parameters" (ranges of random length) in reverse order, as backward
// reduces them, skipping those `skip` says; each add also goes into `ref` (the host partition).
Status Pass(GradRegion& g, std::vector<float>& ref, std::mt19937_64& rng,
            const std::vector<std::pair<size_t, size_t>>& params, std::vector<char> skip = {}) {
  std::normal_distribution<float> d;
  for (size_t k = params.size(); k-- > 0;) {
    if (!skip.empty() && skip[k] != 0) continue;
    const auto [b, n] = params[k];
    std::vector<float> src(n);
    for (float& x : src) x = d(rng);
    for (size_t i = 0; i < n; ++i) ref[b + i] += src[i];
    STRATA_RETURN_IF_ERROR(g.Add(b, src.data(), n));
  }
  return Status::Ok();
}

// Cuts [0, kNumel) into ranges of random length (crossing chunks), with a gap of padding.
std::vector<std::pair<size_t, size_t>> Params(std::mt19937_64& rng) {
  std::vector<std::pair<size_t, size_t>> p;
  std::uniform_int_distribution<size_t> len(1, 7000);
  for (size_t at = 0; at < kNumel;) {
    const size_t n = std::min(len(rng), kNumel - at);
    p.emplace_back(at, n);
    at += n + (p.size() % 5 == 0 ? std::min<size_t>(64, kNumel - at - n) : 0);
  }
  return p;
}

double ReferenceSquaredNorm(const std::vector<float>& g) {
  double total = 0;
  for (size_t c = 0; c < g.size(); c += kNormChunk) {
    double s = 0;
    for (size_t i = c; i < std::min(g.size(), c + kNormChunk); ++i) {
      s += static_cast<double>(g[i]) * g[i];
    }
    total += s;
  }
  return total;
}

// Random adds into a region, mirrored into a host array (the reference).
struct ReferenceAdds {
  explicit ReferenceAdds(GradRegion* region) : region(region) {}
  Status Add(size_t b, size_t n) {
    std::vector<float> src(n);
    for (float& x : src) x = d(rng);
    for (size_t i = 0; i < n; ++i) ref[b + i] += src[i];
    return region->Add(b, src.data(), n);
  }
  GradRegion* region;
  std::vector<float> ref = std::vector<float>(kNumel, 0.0f);
  std::mt19937_64 rng{TestSeed()};
  std::normal_distribution<float> d;
};

// Note [A buffer to read through]: the overlapped step reads finished chunks while backward adds
// into later ones. Its reads must not evict the chunks being added into: here every chunk leaves
// its add buffer once (one write) and is read once, and what is read equals the adds (a host array
// given the same adds). Through the add buffers' LRU each read of a chunk that had left its buffer
// evicted one being added into (an extra write, and a read-back at its next add).
TEST(GradRegionTest, ReadsOfFinishedChunksDoNotEvictTheChunksBeingAddedInto) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 2);
  ASSERT_NE(r.region, nullptr);
  EXPECT_EQ(r.region->cpu_bytes(), 3 * kChunk * sizeof(float));  // two to add into, one to read
  ReferenceAdds adds(r.region.get());
  std::vector<float>& ref = adds.ref;
  auto add = [&](size_t b, size_t n) { return adds.Add(b, n); };
  auto expect_read = [&](size_t c) {
    const size_t n = std::min(kChunk, kNumel - c * kChunk);
    std::vector<float> got(n, -1.0f);
    ASSERT_THAT(r.region->Read(c * kChunk, n, got.data()), IsOk());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + c * kChunk)) << "chunk " << c;
  };
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  // Backward order, chunks 4 to 0, each in two halves; between them the step reads the chunk
  // finished two chunks earlier (4 while 2 is added, 3 while 1 is, 2 while 0 is).
  const size_t h = kChunk / 2;
  for (size_t c = 5; c-- > 0;) {
    ASSERT_THAT(add(c * kChunk + h, h), IsOk());
    if (c + 2 <= 4) expect_read(c + 2);
    ASSERT_THAT(add(c * kChunk, h), IsOk());
  }
  ASSERT_THAT(r.region->EndPass(), IsOk());
  const GradRegion::Stats st = r.region->TakeStats();
  // Chunks 4, 3, 2 once each (evicted), and 1 once more: written behind while 0 was added into
  // (Note [Write-behind] in engine/nvme/grad_region.cc; with more to come it would have been the
  // next one evicted).
  EXPECT_EQ(st.bytes_written, 4 * kChunk * sizeof(float));
  EXPECT_EQ(st.bytes_read, 3 * kChunk * sizeof(float));  // the same, read once each
  for (size_t c = 0; c < 6; ++c) expect_read(c);
  EXPECT_EQ(r.region->SquaredNorm(), ReferenceSquaredNorm(ref));
}

// Note [Write-behind]: as the backward fills the region from its end down, the chunk above the
// one being added into is complete, and its write starts then, not when its buffer is next
// needed. Counted by the bytes whose write has started: after the adds into chunk 3 (two add
// buffers), chunk 5 was evicted by them and chunk 4 written behind; adding into chunk 4 again (a
// late add) waits for that write and it is written once more later, with the same values.
TEST(GradRegionTest, AChunkAboveTheOneAddedIntoIsWrittenBehind) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 2);
  ASSERT_NE(r.region, nullptr);
  ReferenceAdds adds(r.region.get());
  std::vector<float>& ref = adds.ref;
  auto add = [&](size_t b, size_t n) { return adds.Add(b, n); };
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  const size_t last = kNumel - 5 * kChunk;  // chunk 5 is the partial last one
  ASSERT_THAT(add(5 * kChunk, last), IsOk());
  ASSERT_THAT(add(4 * kChunk, kChunk), IsOk());
  EXPECT_EQ(r.region->TakeStats().bytes_written, last * sizeof(float));  // 5 behind 4
  ASSERT_THAT(add(3 * kChunk, kChunk), IsOk());
  EXPECT_EQ(r.region->TakeStats().bytes_written, kChunk * sizeof(float));  // 4 behind 3
  ASSERT_THAT(add(4 * kChunk + 7, 100), IsOk());  // late: waits for 4's write, adds again
  ASSERT_THAT(add(0, 3 * kChunk), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  for (size_t c = 0; c < 6; ++c) {
    const size_t n = std::min(kChunk, kNumel - c * kChunk);
    std::vector<float> got(n, -1.0f);
    ASSERT_THAT(r.region->Read(c * kChunk, n, got.data()), IsOk());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + c * kChunk)) << "chunk " << c;
  }
  EXPECT_EQ(r.region->SquaredNorm(), ReferenceSquaredNorm(ref));
}

// Note [A chunk is done when its adds are]: four "layers" of a large parameter then a small norm
// (flat order), the backward adding each layer's large parameter and then its norm (arrival
// order), so the chunk that holds a norm gets a late add after the backward moved below it. The
// last element is padding no pass adds. From the second step on the region knows each chunk's
// count: no chunk is read back and each is written once, with the values and the norm of a host
// array given the same adds. The first step, before any count, writes some chunks twice.
TEST(GradRegionTest, AChunkIsWrittenWhenItsAddsAreDoneSoLateAddsReadNothingBack) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 3);
  ASSERT_NE(r.region, nullptr);
  constexpr size_t kLayer = 10990, kNorm = 990;  // 4 layers: [0, 43960) of kNumel 43961
  const uint64_t whole = kNumel * sizeof(float);
  for (int step = 0; step < 2; ++step) {
    ReferenceAdds adds(r.region.get());
    r.region->TakeStats();  // not the previous step's reads
    ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
    for (size_t layer = 4; layer-- > 0;) {
      const size_t at = layer * kLayer;
      ASSERT_THAT(adds.Add(at, kLayer - kNorm), IsOk());
      ASSERT_THAT(adds.Add(at + kLayer - kNorm, kNorm), IsOk());
    }
    ASSERT_THAT(r.region->EndPass(), IsOk());
    ASSERT_THAT(r.region->Flush(), IsOk());
    const GradRegion::Stats st = r.region->TakeStats();
    if (step == 0) {
      EXPECT_GT(st.bytes_written, whole);  // the norms' chunks written before their late adds
    } else {
      EXPECT_EQ(st.bytes_read, 0u);
      EXPECT_EQ(st.bytes_written, whole);
    }
    for (size_t c = 0; c < 6; ++c) {
      const size_t n = std::min(kChunk, kNumel - c * kChunk);
      std::vector<float> got(n, -1.0f);
      ASSERT_THAT(r.region->Read(c * kChunk, n, got.data()), IsOk());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), adds.ref.begin() + c * kChunk))
          << "step " << step << " chunk " << c;
    }
    EXPECT_EQ(r.region->SquaredNorm(), ReferenceSquaredNorm(adds.ref)) << "step " << step;
  }
}

// Note [Rows to the region] (engine/zero/grad/grad_reducer.cc): in a step's first pass a
// parameter may arrive as its rows, added, and AddZeros for the elements between them. That must
// read back as the whole add of a slot that is zero outside the rows, bit for bit, and count as
// it: a step after one that set the counts writes the chunks with rows behind by the pass's end,
// as whole adds do (Note [A chunk is done when its adds are]), which an AddZeros that counted
// nothing would not.
TEST(GradRegionTest, ZerosBetweenRowsCountAsTheWholeAddAndReadBackAsZeros) {
  constexpr size_t kLow = 2000, kHigh = 30000;  // the "embedding": [kLow, kHigh), 4 chunks
  const std::vector<std::pair<size_t, size_t>> rows = {{5000, 100}, {17000, 50}, {26000, 500}};
  struct Outcome {
    uint64_t written_by_end_pass = 0;
    std::vector<float> values;
  };
  auto run = [&](bool as_rows) {
    ScratchDir dir;
    Rig r = MakeRig(dir, 3);
    Outcome o;
    if (r.region == nullptr) return o;
    std::mt19937_64 rng(TestSeed());
    std::normal_distribution<float> d;
    auto values = [&](size_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = d(rng);
      return v;
    };
    for (int step = 0; step < 2; ++step) {
      EXPECT_THAT(r.region->BeginPass(true, true), IsOk());
      std::vector<float> top = values(kNumel - kHigh), low = values(kLow);
      EXPECT_THAT(r.region->Add(kHigh, top.data(), top.size()), IsOk());
      std::vector<float> emb(kHigh - kLow, 0.0f);  // the slot: zero outside the rows
      for (const auto& [b, n] : rows) {
        const std::vector<float> v = values(n);
        std::copy(v.begin(), v.end(), emb.begin() + static_cast<long>(b - kLow));
      }
      if (step == 0 || !as_rows) {
        EXPECT_THAT(r.region->Add(kLow, emb.data(), emb.size()), IsOk());
      } else {  // the gaps counted first, then the rows last first, as the reducer sends them
        size_t below = kHigh;
        for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
          EXPECT_THAT(r.region->AddZeros(it->first + it->second, below - it->first - it->second),
                      IsOk());
          below = it->first;
        }
        EXPECT_THAT(r.region->AddZeros(kLow, below - kLow), IsOk());
        for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
          EXPECT_THAT(r.region->Add(it->first, emb.data() + (it->first - kLow), it->second),
                      IsOk());
        }
      }
      EXPECT_THAT(r.region->Add(0, low.data(), low.size()), IsOk());
      EXPECT_THAT(r.region->EndPass(), IsOk());
      const GradRegion::Stats st = r.region->TakeStats();
      if (step == 1) o.written_by_end_pass = st.bytes_written;
    }
    o.values.assign(kNumel, -1.0f);
    EXPECT_THAT(r.region->Read(0, kNumel, o.values.data()), IsOk());
    return o;
  };
  const Outcome whole = run(false), got = run(true);
  ASSERT_EQ(got.values.size(), kNumel);
  EXPECT_EQ(std::memcmp(whole.values.data(), got.values.data(), kNumel * sizeof(float)), 0);
  // The same chunks written behind, but for chunk 1 ([8192, 16384)), wholly between two rows:
  // zeros only, it is never loaded, so never written (it reads as zeros, as a chunk no add
  // reached does).
  EXPECT_GT(whole.written_by_end_pass, kChunk * sizeof(float));  // chunks written behind
  EXPECT_EQ(got.written_by_end_pass, whole.written_by_end_pass - kChunk * sizeof(float));
}

TEST(GradRegionTest, AddZerosRefusesARangeOutsideThePartitionAndAConsumedChunk) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 6);
  ASSERT_NE(r.region, nullptr);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  EXPECT_THAT(r.region->AddZeros(kNumel - 10, 11),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("zeros for"), HasSubstr("outside the partition"))));
  const std::vector<float> ones(kChunk, 1.0f);
  ASSERT_THAT(r.region->Add(0, ones.data(), kChunk), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  ASSERT_THAT(r.region->Consume(0, kChunk), IsOk());  // chunk 0 leaves its buffer unwritten
  EXPECT_THAT(r.region->AddZeros(10, 5),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("chunk 0"), HasSubstr("consumed"))));
}

// Note [Sums taken once]: a chunk consumed during the last pass (an update final before the
// backward ends) has its sums taken as it leaves its buffer; one consumed or written out after
// EndPass keeps the sums EndPass took. Three steps, the last one with an Inf in a chunk consumed
// before EndPass: the norm equals a double loop over a host array given the same adds, and the
// overflow is seen. With 2 buffers chunks leave by eviction too; with 6 every chunk stays.
TEST(GradRegionTest, ConsumedChunksKeepTheirSumsWhetherConsumedBeforeOrAfterEndPass) {
  for (const size_t buffers : {size_t{2}, size_t{6}}) {
    SCOPED_TRACE("buffers " + std::to_string(buffers));
    ScratchDir dir;
    Rig r = MakeRig(dir, buffers);
    ASSERT_NE(r.region, nullptr);
    for (int step = 0; step < 3; ++step) {
      ReferenceAdds adds(r.region.get());
      adds.rng.seed(TestSeed() + static_cast<uint64_t>(step));
      ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
      for (size_t c = 6; c-- > 0;) {  // the backward's order: chunk 5 (short) down to 0
        const size_t n = std::min(kChunk, kNumel - c * kChunk);
        ASSERT_THAT(adds.Add(c * kChunk, n), IsOk());
        if (step == 2 && c == 4) {
          const float inf = std::numeric_limits<float>::infinity();
          ASSERT_THAT(r.region->Add(4 * kChunk + 17, &inf, 1), IsOk());
          adds.ref[4 * kChunk + 17] += inf;
        }
        // Chunks 5 and 4 are consumed as soon as the backward has moved below them.
        if (c == 3) {
          ASSERT_THAT(r.region->Consume(4 * kChunk, kNumel - 4 * kChunk), IsOk());
        }
      }
      ASSERT_THAT(r.region->EndPass(), IsOk());
      ASSERT_THAT(r.region->Consume(kChunk, 3 * kChunk), IsOk());  // 1-3 after EndPass
      ASSERT_THAT(r.region->Flush(), IsOk());                      // chunk 0 written out
      const double want = ReferenceSquaredNorm(adds.ref);
      if (step < 2) {
        EXPECT_EQ(r.region->SquaredNorm(), want) << "step " << step;
        EXPECT_FALSE(r.region->HasNonFinite()) << "step " << step;
      } else {
        EXPECT_TRUE(std::isinf(want));
        EXPECT_TRUE(r.region->HasNonFinite());
      }
    }
  }
}

class GradRegionBuffersTest : public ::testing::TestWithParam<size_t> {};

TEST_P(GradRegionBuffersTest, AccumulatesTwoMicroBatchesLikeTheHostPartitionBitwise) {
  ScratchDir dir;
  Rig r = MakeRig(dir, GetParam());
  ASSERT_NE(r.region, nullptr);
  std::mt19937_64 rng(TestSeed());
  const auto params = Params(rng);
  for (int step = 0; step < 2; ++step) {  // the second step starts from zero again
    std::vector<float> ref(kNumel, 0.0f);
    // Micro-batch 1 touches every parameter; micro-batch 2 skips every third one (their chunks'
    // values then come only from the first pass).
    std::vector<char> skip(params.size(), 0);
    for (size_t k = 0; k < skip.size(); k += 3) skip[k] = 1;
    ASSERT_THAT(r.region->BeginPass(true, false), IsOk());
    ASSERT_THAT(Pass(*r.region, ref, rng, params), IsOk());
    ASSERT_THAT(r.region->EndPass(), IsOk());
    ASSERT_THAT(r.region->BeginPass(false, true), IsOk());
    ASSERT_THAT(Pass(*r.region, ref, rng, params, skip), IsOk());
    ASSERT_THAT(r.region->EndPass(), IsOk());
    const double want = ReferenceSquaredNorm(ref);
    EXPECT_EQ(r.region->SquaredNorm(), want) << "step " << step;
    EXPECT_FALSE(r.region->HasNonFinite());
    std::vector<float> got(kNumel, -1.0f);
    ASSERT_THAT(r.region->Read(0, kNumel, got.data()), IsOk());
    EXPECT_EQ(got, ref) << "step " << step;
    // A range across chunks reads the same.
    std::vector<float> part(kChunk + 100);
    ASSERT_THAT(r.region->Read(kChunk - 50, part.size(), part.data()), IsOk());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), ref.begin() + (kChunk - 50)));
  }
  const GradRegion::Stats st = r.region->TakeStats();
  if (GetParam() < r.region->num_chunks()) {  // chunks left the buffers: read-add-write
    EXPECT_GT(st.bytes_written, 0u);
    EXPECT_GT(st.bytes_read, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Buffers, GradRegionBuffersTest, ::testing::Values(1, 2, 8),
                         [](const auto& info) { return "buffers" + std::to_string(info.param); });

TEST(GradRegionTest, ChunkNeverWrittenReadsAsZerosWithoutIo) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 1);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  std::vector<float> one(10, 2.0f);
  ASSERT_THAT(r.region->Add(3 * kChunk + 5, one.data(), one.size()), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  std::vector<float> got(kNumel, 7.0f);
  ASSERT_THAT(r.region->Read(0, kNumel, got.data()), IsOk());
  std::vector<float> want(kNumel, 0.0f);
  std::fill(want.begin() + 3 * kChunk + 5, want.begin() + 3 * kChunk + 15, 2.0f);
  EXPECT_EQ(got, want);
  EXPECT_EQ(r.region->SquaredNorm(), 40.0);
  EXPECT_EQ(r.region->TakeStats().bytes_read, 0u);
}

TEST(GradRegionTest, OverflowIsSeenInTheLastPassAndInChunksOnlyAnEarlierPassWrote) {
  for (const bool in_last_pass : {true, false}) {
    ScratchDir dir;
    Rig r = MakeRig(dir, 1);
    std::vector<float> v(100, 1.0f);
    ASSERT_THAT(r.region->BeginPass(true, false), IsOk());
    ASSERT_THAT(r.region->Add(0, v.data(), v.size()), IsOk());
    if (!in_last_pass) v[7] = std::numeric_limits<float>::quiet_NaN();
    ASSERT_THAT(r.region->Add(2 * kChunk, v.data(), v.size()), IsOk());  // evicts chunk 0
    ASSERT_THAT(r.region->EndPass(), IsOk());
    ASSERT_THAT(r.region->BeginPass(false, true), IsOk());
    std::vector<float> w(100, 1.0f);
    if (in_last_pass) w[3] = std::numeric_limits<float>::infinity();
    ASSERT_THAT(r.region->Add(4 * kChunk, w.data(), w.size()), IsOk());
    ASSERT_THAT(r.region->EndPass(), IsOk());
    EXPECT_TRUE(r.region->HasNonFinite()) << (in_last_pass ? "last pass" : "first pass only");
  }
}

TEST(GradRegionTest, RefusesChunksOffTheNormChunking) {
  ScratchDir dir;
  auto aio = std::move(AioHandle::Create({})).value();
  GradRegionOptions o;
  o.nvme_paths = {dir.path().string()};
  o.chunk_numel = 5000;
  EXPECT_THAT(GradRegion::Create(kNumel, o, aio.get()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("multiple of 4096")));
}

TEST(GradRegionTest, WriteErrorNamesChunkFileAndOffset) {
  for (const bool enospc : {false, true}) {
    ScratchDir dir;
    FaultPlan plan;
    plan.armed = std::make_shared<std::atomic<bool>>(false);
    plan.only_writes = true;
    (enospc ? plan.enospc_every : plan.eio_every) = 1;
    Rig r = MakeRig(dir, 1, plan);
    plan.armed->store(true);
    ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
    std::vector<float> v(kChunk, 1.0f);
    Status s = r.region->Add(0, v.data(), v.size());
    if (s.ok()) s = r.region->Add(kChunk, v.data(), v.size());      // writes chunk 0 out
    if (s.ok()) s = r.region->Add(2 * kChunk, v.data(), v.size());  // waits for that write
    if (s.ok()) s = r.region->Flush();
    EXPECT_THAT(
        s,
        StatusIs(StatusCode::kIoError,
                 AllOf(HasSubstr("gradient region chunk 0"), HasSubstr(kGradFile), HasSubstr(" @ "),
                       HasSubstr(enospc ? "No space left on device" : "Input/output error"))));
    plan.armed->store(false);
  }
}

TEST(GradRegionTest, ReadBackErrorNamesChunkFileAndOffset) {
  ScratchDir dir;
  FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  plan.only_reads = true;
  plan.eio_every = 1;
  Rig r = MakeRig(dir, 1, plan);
  std::vector<float> v(kChunk, 1.0f);
  ASSERT_THAT(r.region->BeginPass(true, false), IsOk());
  ASSERT_THAT(r.region->Add(0, v.data(), v.size()), IsOk());
  ASSERT_THAT(r.region->Add(kChunk, v.data(), v.size()), IsOk());
  ASSERT_THAT(r.region->BeginPass(false, true), IsOk());
  plan.armed->store(true);
  EXPECT_THAT(r.region->Add(0, v.data(), v.size()),  // read-add-write of chunk 0
              StatusIs(StatusCode::kIoError,
                       AllOf(HasSubstr("read of gradient region chunk 0"), HasSubstr(kGradFile),
                             HasSubstr(" @ "), HasSubstr("Input/output error"))));
  plan.armed->store(false);
}

TEST(GradRegionTest, ShortWritesAndReadsAreResumedAndChangeNothing) {
  ScratchDir clean_dir, faulty_dir;
  FaultPlan plan;
  plan.short_every = 1;
  Rig clean = MakeRig(clean_dir, 1), faulty = MakeRig(faulty_dir, 1, plan);
  const uint64_t seed = TestSeed();
  std::vector<float> a(kNumel), b(kNumel), ref_a(kNumel, 0.0f), ref_b(kNumel, 0.0f);
  for (auto* rig : {&clean, &faulty}) {
    std::mt19937_64 rng(seed);
    const auto params = Params(rng);
    std::vector<float>& ref = rig == &clean ? ref_a : ref_b;
    for (const bool first : {true, false}) {
      ASSERT_THAT(rig->region->BeginPass(first, !first), IsOk());
      ASSERT_THAT(Pass(*rig->region, ref, rng, params), IsOk());
      ASSERT_THAT(rig->region->EndPass(), IsOk());
    }
  }
  ASSERT_THAT(clean.region->Read(0, kNumel, a.data()), IsOk());
  ASSERT_THAT(faulty.region->Read(0, kNumel, b.data()), IsOk());
  EXPECT_EQ(a, ref_a);
  EXPECT_EQ(b, a);
  EXPECT_EQ(faulty.region->SquaredNorm(), clean.region->SquaredNorm());
}

TEST(GradRegionTest, CorruptedBlockIsDataLossByItsChecksum) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 1);
  std::vector<float> v(kChunk, 0.5f);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  ASSERT_THAT(r.region->Add(0, v.data(), v.size()), IsOk());
  ASSERT_THAT(r.region->Add(kChunk, v.data(), v.size()), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  ASSERT_THAT(r.region->Flush(), IsOk());
  // Chunk 0 is only on disk now (the one buffer holds chunk 1); flip bytes inside it.
  const std::string path = dir.File(kGradFile);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t bytes[8];
  ASSERT_EQ(::pread(fd, bytes, sizeof(bytes), 1000), 8);
  for (uint8_t& x : bytes) x ^= 0x5A;
  ASSERT_EQ(::pwrite(fd, bytes, sizeof(bytes), 1000), 8);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
  std::vector<float> got(kChunk);
  EXPECT_THAT(r.region->Read(0, kChunk, got.data()),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("checksum mismatch"), HasSubstr(kGradFile), HasSubstr(" @ "),
                             HasSubstr("gradient region chunk 0"))));
}

}  // namespace
}  // namespace strata
