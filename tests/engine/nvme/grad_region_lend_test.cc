// GradRegion::Lend (Note [Gradients read in place] in engine/nvme/grad_region_lend.cc): an update
// reads the gradients in the region's add buffers. What a view reads equals a host array given
// the same adds, element by element across chunk edges; a lent buffer keeps its values while the
// adds go on (an add that needs its room waits for it to be given back); a range not all in add
// buffers is not lent; consuming a lent chunk or starting a step while one is lent is refused.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "aio/aio_handle.h"
#include "engine/nvme/grad_region.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kChunk = 8192;               // elements: 2 norm chunks
constexpr size_t kNumel = 5 * kChunk + 3001;  // six chunks, the last short

struct Rig {
  std::unique_ptr<AioHandle> aio;
  std::unique_ptr<GradRegion> region;
  std::vector<float> ref = std::vector<float>(kNumel, 0.0f);  // the host partition's adds
  std::mt19937_64 rng{TestSeed()};

  Status Add(size_t b, size_t n) {
    std::normal_distribution<float> d;
    std::vector<float> src(n);
    for (float& x : src) x = d(rng);
    for (size_t i = 0; i < n; ++i) ref[b + i] += src[i];
    return region->Add(b, src.data(), n);
  }
  // Every element of [b, b + n) read through v equals the reference; Run never crosses a chunk.
  void ExpectView(const GradView& v, size_t b, size_t n) const {
    size_t wrong = 0;
    for (size_t e = b; e < b + n; ++e) {
      wrong += *v.At(e) != ref[e];
      if (v.lent()) {
        EXPECT_EQ(v.Run(e), kChunk - e % kChunk) << "element " << e;
      }
    }
    EXPECT_EQ(wrong, 0u) << "of " << n << " elements from " << b;
  }
};

Rig MakeRig(const ScratchDir& dir, size_t buffers) {
  Rig r;
  AioOptions ao;
  ao.block_size = 64 << 10;
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

TEST(GradRegionLendTest, AViewReadsTheAddBuffersAcrossChunkEdgesWithoutIo) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 6);  // every chunk has a buffer
  ASSERT_NE(r.region, nullptr);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  // Adds in backward order, ranges crossing chunks; chunk 2's first half never added (zeros).
  ASSERT_THAT(r.Add(3 * kChunk + 100, kNumel - 3 * kChunk - 100), IsOk());
  ASSERT_THAT(r.Add(2 * kChunk + kChunk / 2, kChunk / 2 + 100), IsOk());
  ASSERT_THAT(r.Add(0, 2 * kChunk), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  r.region->TakeStats();
  {
    // A sub-group over chunks 1, 2 and 3.
    const size_t b = kChunk + 77, n = 2 * kChunk + 500;
    Result<GradView> v = r.region->Lend(b, n);
    ASSERT_THAT(v.status(), IsOk());
    ASSERT_TRUE(v->lent());
    r.ExpectView(*v, b, n);
    // The adds go on into chunks not lent, and into elements of a lent chunk the view does not
    // read (chunk 3's tail): the view still reads the reference.
    ASSERT_THAT(r.Add(5 * kChunk, 3001), IsOk());
    ASSERT_THAT(r.Add(b + n, 10), IsOk());
    r.ExpectView(*v, b, n);
  }
  const GradRegion::Stats st = r.region->TakeStats();
  EXPECT_EQ(st.bytes_read, 0u);
  EXPECT_EQ(st.bytes_written, 0u);
  std::vector<float> got(kNumel);
  ASSERT_THAT(r.region->Read(0, kNumel, got.data()), IsOk());
  EXPECT_EQ(got, r.ref);
}

TEST(GradRegionLendTest, ARangeWithAChunkOnNvmeIsNotLentAndReadsTheSame) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 2);  // two add buffers and one to read through
  ASSERT_NE(r.region, nullptr);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  for (size_t c = 6; c-- > 0;) {
    ASSERT_THAT(r.Add(c * kChunk, std::min(kChunk, kNumel - c * kChunk)), IsOk());
  }
  ASSERT_THAT(r.region->EndPass(), IsOk());
  // Chunks 0 and 1 are in the add buffers, 2 to 5 were written out.
  Result<GradView> lent = r.region->Lend(100, kChunk);
  ASSERT_THAT(lent.status(), IsOk());
  EXPECT_TRUE(lent->lent());
  r.ExpectView(*lent, 100, kChunk);
  Result<GradView> none = r.region->Lend(kChunk + 100, kChunk);  // chunk 2 is on NVMe
  ASSERT_THAT(none.status(), IsOk());
  EXPECT_TRUE(none->empty());
  std::vector<float> got(kChunk);
  ASSERT_THAT(r.region->Read(kChunk + 100, kChunk, got.data()), IsOk());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), r.ref.begin() + kChunk + 100));
  EXPECT_THAT(r.region->Lend(kNumel - 5, 6).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("outside the partition")));
}

// The two add buffers both lent: the next add needs room, and it waits for a buffer to be given
// back instead of reusing one (which would overwrite what the update is reading).
TEST(GradRegionLendTest, AnAddThatNeedsALentBufferWaitsForItToBeGivenBack) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 2);
  ASSERT_NE(r.region, nullptr);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  ASSERT_THAT(r.Add(5 * kChunk, 3001), IsOk());
  ASSERT_THAT(r.Add(4 * kChunk, kChunk), IsOk());
  const size_t b = 4 * kChunk + 10, n = kChunk + 1000;  // chunks 4 and 5
  auto v = std::make_unique<GradView>(std::move(r.region->Lend(b, n)).value());
  ASSERT_TRUE(v->lent());
  // The add's values, drawn here (the reference is updated by this thread only).
  std::vector<float> src(kChunk, 0.5f);
  std::atomic<bool> added{false};
  Status add_status;
  std::thread adder([&] {
    add_status = r.region->Add(3 * kChunk, src.data(), kChunk);
    added = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(added.load()) << "the add took a lent buffer";
  r.ExpectView(*v, b, n);
  v.reset();  // given back: the add goes on
  adder.join();
  ASSERT_THAT(add_status, IsOk());
  for (size_t i = 0; i < kChunk; ++i) r.ref[3 * kChunk + i] += src[i];
  std::vector<float> got(kNumel);
  ASSERT_THAT(r.region->Read(0, kNumel, got.data()), IsOk());
  EXPECT_EQ(got, r.ref);
}

TEST(GradRegionLendTest, ConsumingALentChunkOrANewStepWhileLentIsRefused) {
  ScratchDir dir;
  Rig r = MakeRig(dir, 6);
  ASSERT_NE(r.region, nullptr);
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
  ASSERT_THAT(r.Add(0, kNumel), IsOk());
  ASSERT_THAT(r.region->EndPass(), IsOk());
  {
    Result<GradView> v = r.region->Lend(0, kChunk);
    ASSERT_TRUE(v.ok() && v->lent());
    EXPECT_THAT(r.region->Consume(0, kChunk),
                StatusIs(StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("chunk 0"), HasSubstr("lent to an update"))));
    EXPECT_THAT(r.region->BeginPass(true, true),
                StatusIs(StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("chunk 0"), HasSubstr("lent to an update"))));
    GradView moved = std::move(*v);  // a moved view gives back once, when it is destroyed
    EXPECT_TRUE(v->empty());
    r.ExpectView(moved, 0, kChunk);
  }
  ASSERT_THAT(r.region->Consume(0, kChunk), IsOk());
  EXPECT_THAT(r.region->Lend(0, kChunk).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("consumed")));
  ASSERT_THAT(r.region->BeginPass(true, true), IsOk());
}

}  // namespace
}  // namespace strata
