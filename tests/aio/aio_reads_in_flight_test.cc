// How deep an aio thread's read queue ran (AioHandle::TakeMaxReadsInFlight, Note [Reads in
// flight] in aio/aio_worker_trace.cc): a read of more pieces than the queue holds fills every slot;
// reads issued one at a time and waited for keep one piece in flight; writes are not counted; each
// call starts a new count.
#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

constexpr int kDepth = 4;
constexpr size_t kPiece = 4096, kPieces = 16, kBytes = kPiece * kPieces;

class AioReadsInFlightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_AIO_OR_SKIP(IoEngineKind::kAuto);
    AioOptions o;
    o.queue_depth = kDepth;
    o.block_size = kPiece;
    o.allow_buffered = true;
    auto h = AioHandle::Create(o);
    ASSERT_THAT(h.status(), IsOk());
    aio_ = std::move(h).value();
    auto b = AlignedBuffer::Allocate(kBytes);
    ASSERT_THAT(b.status(), IsOk());
    buf_ = std::move(b).value();
    ::strata::testing::FillRandom(buf_.bytes(), kBytes, 9);
    file_ = dir_.File("data.bin");
    ASSERT_THAT(aio_->Pwrite(file_, buf_.bytes(), kBytes, 0), IsOk());
  }

  ::strata::testing::ScratchDir dir_;
  std::unique_ptr<AioHandle> aio_;
  AlignedBuffer buf_;
  std::string file_;
};

TEST_F(AioReadsInFlightTest, WritesAreNotCounted) {
  EXPECT_EQ(aio_->TakeMaxReadsInFlight(), 0) << "SetUp only wrote";
}

TEST_F(AioReadsInFlightTest, AReadOfMorePiecesThanTheQueueHoldsFillsIt) {
  aio_->TakeMaxReadsInFlight();
  auto back = AlignedBuffer::Allocate(kBytes);
  ASSERT_THAT(back.status(), IsOk());
  ASSERT_THAT(aio_->Pread(file_, back->bytes(), kBytes, 0), IsOk());
  EXPECT_EQ(std::memcmp(back->bytes(), buf_.bytes(), kBytes), 0);
  EXPECT_EQ(aio_->TakeMaxReadsInFlight(), kDepth);
  EXPECT_EQ(aio_->TakeMaxReadsInFlight(), 0) << "each call starts a new count";
}

TEST_F(AioReadsInFlightTest, ReadsWaitedForOneAtATimeKeepOnePieceInFlight) {
  aio_->TakeMaxReadsInFlight();
  auto back = AlignedBuffer::Allocate(kBytes);
  ASSERT_THAT(back.status(), IsOk());
  for (size_t p = 0; p < kPieces; ++p) {
    ASSERT_THAT(aio_->Pread(file_, back->bytes() + p * kPiece, kPiece, p * kPiece), IsOk());
  }
  EXPECT_EQ(std::memcmp(back->bytes(), buf_.bytes(), kBytes), 0);
  EXPECT_EQ(aio_->TakeMaxReadsInFlight(), 1);
}

}  // namespace
}  // namespace strata
