// A read queued behind a long write on the same aio thread gets the next free slots instead of
// waiting for every piece of the write (Note [Reads first] in aio/aio_worker.cc): the optimizer
// step waits for its next sub-group's read while the last ones are written back.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

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

// Records the op of every piece submitted, in order. The first Submit once armed is held until
// the test lets it go, so both requests are queued while the write's first pieces are out.
class RecordingEngine final : public IoEngineWrapper {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool armed = false;  // the next Submit is held
    bool in_first_submit = false, release = false;
    std::vector<IoOp> ops;

    // Forgets what was submitted so far and holds the next Submit.
    void Arm() {
      std::lock_guard lock(mu);
      ops.clear();
      armed = true;
    }
    // Whether the held Submit was reached (bounded: a failure must not hang the test).
    bool WaitHeld() {
      std::unique_lock lock(mu);
      return cv.wait_for(lock, std::chrono::seconds(30), [&] { return in_first_submit; });
    }
    void Release() {
      {
        std::lock_guard lock(mu);
        release = true;
      }
      cv.notify_all();
    }
    // The ops submitted since Arm.
    std::vector<IoOp> Ops() {
      std::lock_guard lock(mu);
      return ops;
    }
  };
  RecordingEngine(std::unique_ptr<IoEngine> target, Shared* shared)
      : IoEngineWrapper(std::move(target)), shared_(shared) {}

  Result<int> Submit(std::span<const IoRequest> r) override {
    {
      std::unique_lock lock(shared_->mu);
      const bool first = shared_->armed;
      shared_->armed = false;
      for (const IoRequest& q : r) shared_->ops.push_back(q.op);
      if (first) {
        shared_->in_first_submit = true;
        shared_->cv.notify_all();
        // Bounded: a failure elsewhere must fail the test, not hang it.
        shared_->cv.wait_for(lock, std::chrono::seconds(30), [&] { return shared_->release; });
      }
    }
    return target().Submit(r);
  }

 private:
  Shared* shared_;
};

// One thread, two pieces in flight, 4 KiB pieces, on a RecordingEngine.
Result<std::unique_ptr<AioHandle>> RecordingHandle(RecordingEngine::Shared* shared) {
  AioOptions o;
  o.queue_depth = 2;
  o.block_size = 4096;
  o.allow_buffered = true;
  o.engine_factory = [shared](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new RecordingEngine(std::move(real), shared));
  };
  return AioHandle::Create(o);
}

TEST(AioReadsFirstTest, AReadQueuedBehindALongWriteIsIssuedBeforeTheWritesRest) {
  STRATA_AIO_OR_SKIP(IoEngineKind::kAuto);
  RecordingEngine::Shared shared;
  auto h = RecordingHandle(&shared);
  ASSERT_THAT(h.status(), IsOk());
  ::strata::testing::ScratchDir dir;
  constexpr size_t kPieces = 32, kBytes = kPieces * 4096;
  auto data = AlignedBuffer::Allocate(kBytes);
  auto other = AlignedBuffer::Allocate(4096);
  auto back = AlignedBuffer::Allocate(4096);
  ASSERT_THAT(data.status(), IsOk());
  ASSERT_THAT(other.status(), IsOk());
  ASSERT_THAT(back.status(), IsOk());
  ::strata::testing::FillRandom(data->bytes(), kBytes, 3);
  ::strata::testing::FillRandom(other->bytes(), 4096, 4);
  const std::string big = dir.File("big.bin"), small = dir.File("small.bin");
  ASSERT_THAT((*h)->Pwrite(small, other->bytes(), 4096, 0), IsOk());
  shared.Arm();

  AioFuture w = (*h)->SubmitWrite(big, data->bytes(), kBytes, 0);
  ASSERT_TRUE(shared.WaitHeld()) << "the write never reached the engine";
  AioFuture r = (*h)->SubmitRead(small, back->bytes(), 4096, 0);
  shared.Release();
  ASSERT_THAT(w.Wait(), IsOk());
  ASSERT_THAT(r.Wait(), IsOk());
  EXPECT_EQ(std::memcmp(back->bytes(), other->bytes(), 4096), 0);

  // The write's first pieces went out before the read arrived; the read's piece goes out with
  // the next free slot, ahead of the ~30 write pieces still queued.
  const std::vector<IoOp> ops = shared.Ops();
  ASSERT_EQ(ops.size(), kPieces + 1);
  size_t read_at = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == IoOp::kRead) read_at = i;
  }
  EXPECT_LE(read_at, 4u) << "the read went out after " << read_at << " write pieces of " << kPieces;
  // Both requests landed whole: the file holds the write's bytes.
  auto check = AlignedBuffer::Allocate(kBytes);
  ASSERT_THAT(check.status(), IsOk());
  ASSERT_THAT((*h)->Pread(big, check->bytes(), kBytes, 0), IsOk());
  EXPECT_EQ(std::memcmp(check->bytes(), data->bytes(), kBytes), 0);
}

// The priority is bounded: with a stream of reads queued, a write still goes out after at most
// queue_depth read pieces in a row, not after all of them.
TEST(AioReadsFirstTest, AStreamOfReadsDoesNotHoldAWriteBackForEver) {
  STRATA_AIO_OR_SKIP(IoEngineKind::kAuto);
  RecordingEngine::Shared shared;
  auto h = RecordingHandle(&shared);
  ASSERT_THAT(h.status(), IsOk());
  ::strata::testing::ScratchDir dir;
  constexpr size_t kReads = 40;
  auto src = AlignedBuffer::Allocate(kReads * 4096);
  auto dst = AlignedBuffer::Allocate(kReads * 4096);
  auto w = AlignedBuffer::Allocate(4096);
  ASSERT_THAT(src.status(), IsOk());
  ASSERT_THAT(dst.status(), IsOk());
  ASSERT_THAT(w.status(), IsOk());
  ::strata::testing::FillRandom(src->bytes(), kReads * 4096, 5);
  ::strata::testing::FillRandom(w->bytes(), 4096, 6);
  const std::string in = dir.File("in.bin"), out = dir.File("out.bin");
  ASSERT_THAT((*h)->Pwrite(in, src->bytes(), kReads * 4096, 0), IsOk());
  shared.Arm();
  std::vector<AioFuture> reads;
  reads.push_back((*h)->SubmitRead(in, dst->bytes(), 4096, 0));
  ASSERT_TRUE(shared.WaitHeld()) << "the first read never reached the engine";
  for (size_t i = 1; i < kReads; ++i) {
    reads.push_back((*h)->SubmitRead(in, dst->bytes() + i * 4096, 4096, i * 4096));
  }
  AioFuture wf = (*h)->SubmitWrite(out, w->bytes(), 4096, 0);
  shared.Release();
  for (AioFuture& f : reads) ASSERT_THAT(f.Wait(), IsOk());
  ASSERT_THAT(wf.Wait(), IsOk());
  EXPECT_EQ(std::memcmp(dst->bytes(), src->bytes(), kReads * 4096), 0);

  const std::vector<IoOp> ops = shared.Ops();
  ASSERT_EQ(ops.size(), kReads + 1);
  size_t write_at = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == IoOp::kWrite) write_at = i;
  }
  EXPECT_LE(write_at, 2 * 2 + 1u) << "the write went out after " << write_at << " read pieces";
}

}  // namespace
}  // namespace strata
