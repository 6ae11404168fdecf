// How an aio worker waits while a piece is in the kernel with slots to spare (overlap mode): it
// backs off instead of polling every 200 us for as long as the piece is out (Note [Waiting with
// room] in aio/aio_worker.cc; a 200 us poll kept the kworker that finishes an ext4 O_DIRECT write
// off its CPU, and engine_param_nvme_mpi_world2 hung on that write).
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

// Wraps a real engine. While `holding`, a Reap that may time out reports that nothing has
// completed yet (at once, without waiting: the test needs no clock) and records the timeout it
// was given; the piece stays in the real engine and is reaped once the hold is lifted.
class HoldingEngine final : public IoEngineWrapper {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool holding = true;
    std::vector<int64_t> held_timeouts_us;
  };

  HoldingEngine(std::unique_ptr<IoEngine> target, Shared* shared)
      : IoEngineWrapper(std::move(target)), shared_(shared) {}

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override {
    {
      std::lock_guard lock(shared_->mu);
      if (shared_->holding && timeout_us >= 0) {
        shared_->held_timeouts_us.push_back(timeout_us);
        shared_->cv.notify_all();
        return 0;
      }
    }
    return target().Reap(out, min_complete, timeout_us);
  }

 private:
  Shared* shared_;
};

TEST(AioWaitTest, BacksOffInsteadOfPollingWhileAPieceIsOut) {
  STRATA_AIO_OR_SKIP(IoEngineKind::kAuto);
  HoldingEngine::Shared shared;
  AioOptions o;
  o.queue_depth = 4;  // one piece in flight leaves room: the worker waits with a timeout
  o.overlap_events = true;
  o.allow_buffered = true;
  o.engine_factory = [&shared](int,
                               const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new HoldingEngine(std::move(real), &shared));
  };
  auto h = AioHandle::Create(o);
  ASSERT_THAT(h.status(), IsOk());

  ::strata::testing::ScratchDir dir;
  auto buf = AlignedBuffer::Allocate(4096);
  ASSERT_THAT(buf.status(), IsOk());
  std::memset(buf->bytes(), 0x5a, 4096);
  AioFuture f = (*h)->SubmitWrite(dir.File("w.bin"), buf->bytes(), 4096, 0);

  constexpr size_t kWaits = 40;
  std::vector<int64_t> waits;
  {
    std::unique_lock lock(shared.mu);
    shared.cv.wait(lock, [&] { return shared.held_timeouts_us.size() >= kWaits; });
    shared.holding = false;
    waits = shared.held_timeouts_us;
  }
  EXPECT_THAT(f.Wait(), IsOk());

  // Every wait that found nothing is at least as long as the one before, and they grow from the
  // first (a short look for new work) to ten times that: the worker sleeps in the kernel instead
  // of waking thousands of times a second.
  ASSERT_GE(waits.size(), kWaits);
  for (size_t i = 1; i < waits.size(); ++i) {
    EXPECT_GE(waits[i], waits[i - 1]) << "wait " << i;
  }
  EXPECT_GT(waits.front(), 0);
  EXPECT_GE(waits.back(), 10 * waits.front())
      << "the worker keeps polling every " << waits.back() << " us";
}

TEST(AioWaitTest, ANewSegmentStillJoinsWhileAPieceIsOut) {
  STRATA_AIO_OR_SKIP(IoEngineKind::kAuto);
  // The back-off must not starve overlap: a second request submitted while the first is held is
  // issued and completes (here after the hold is lifted), and both land on disk.
  HoldingEngine::Shared shared;
  AioOptions o;
  o.queue_depth = 4;
  o.overlap_events = true;
  o.allow_buffered = true;
  o.engine_factory = [&shared](int,
                               const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new HoldingEngine(std::move(real), &shared));
  };
  auto h = AioHandle::Create(o);
  ASSERT_THAT(h.status(), IsOk());
  ::strata::testing::ScratchDir dir;
  auto a = AlignedBuffer::Allocate(8192);
  ASSERT_THAT(a.status(), IsOk());
  ::strata::testing::FillRandom(a->bytes(), 8192, 7);
  const std::string path = dir.File("two.bin");
  AioFuture f1 = (*h)->SubmitWrite(path, a->bytes(), 4096, 0);
  {
    std::unique_lock lock(shared.mu);
    shared.cv.wait(lock, [&] { return shared.held_timeouts_us.size() >= 20; });
  }
  AioFuture f2 = (*h)->SubmitWrite(path, a->bytes() + 4096, 4096, 4096);
  {
    std::unique_lock lock(shared.mu);
    const size_t seen = shared.held_timeouts_us.size();
    shared.cv.wait(lock, [&] { return shared.held_timeouts_us.size() >= seen + 20; });
    shared.holding = false;
  }
  EXPECT_THAT(f1.Wait(), IsOk());
  EXPECT_THAT(f2.Wait(), IsOk());
  auto back = AlignedBuffer::Allocate(8192);
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_THAT((*h)->Pread(path, back->bytes(), 8192, 0), IsOk());
  EXPECT_EQ(std::memcmp(back->bytes(), a->bytes(), 8192), 0);
}

}  // namespace
}  // namespace strata
