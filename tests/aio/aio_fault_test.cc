// Every I/O error path, driven by the fault-injecting engine wrapped around each real engine:
// EIO and ENOSPC are reported with file, offset, size and errno text; short transfers and EAGAIN
// are resumed and the data is right.
#include <chrono>
#include <cstring>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "tests/aio/faulty_engine.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::FaultPlan;
using ::strata::testing::FaultyEngine;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

class AioFaultTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override { STRATA_AIO_OR_SKIP(GetParam()); }

  std::unique_ptr<AioHandle> Make(FaultPlan plan, int threads = 1) {
    AioOptions o;
    o.thread_count = threads;
    o.queue_depth = 4;
    o.block_size = 256 << 10;
    IoEngineKind kind = GetParam();
    o.engine_factory = [plan, kind](
                           int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(kind, eo));
      return std::unique_ptr<IoEngine>(new FaultyEngine(std::move(real), plan));
    };
    auto h = AioHandle::Create(o);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? std::move(h).value() : nullptr;
  }

  // A file of `n` random bytes written through a fault-free handle.
  std::vector<uint8_t> WriteFile(const std::string& path, size_t n) {
    auto data = ::strata::testing::RandomBytes(n, ::strata::testing::TestSeed());
    auto clean = Make({});
    EXPECT_THAT(clean->Pwrite(path, data.data(), n, 0), ::strata::testing::IsOk());
    return data;
  }

  ScratchDir dir_;
};

TEST_P(AioFaultTest, ReportsEioAsIoErrorNamingFileOffsetAndSize) {
  const std::string path = dir_.File("eio.bin");
  WriteFile(path, 4 << 20);
  FaultPlan plan;
  plan.eio_every = 3;
  plan.max_faults = 1;
  auto h = Make(plan);
  std::vector<uint8_t> back(4 << 20);
  auto n = h->Pread(path, back.data(), back.size(), 0);
  EXPECT_THAT(n, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr(path), HasSubstr("@ 524288"),  // the 3rd piece
                                HasSubstr("256 KiB"), HasSubstr("Input/output error"))));
  EXPECT_EQ(n.status().sys_errno(), EIO);
}

TEST_P(AioFaultTest, ReportsEnospcOnWrite) {
  FaultPlan plan;
  plan.enospc_every = 2;
  auto h = Make(plan, 2);
  std::vector<uint8_t> data(3 << 20, 7);
  auto n = h->Pwrite(dir_.File("full.bin"), data.data(), data.size(), 0);
  EXPECT_THAT(n, StatusIs(StatusCode::kIoError, AllOf(HasSubstr("write"), HasSubstr("full.bin"),
                                                      HasSubstr("No space left on device"))));
  EXPECT_EQ(n.status().sys_errno(), ENOSPC);
}

TEST_P(AioFaultTest, ResumesShortReadsAndReturnsTheRightData) {
  const std::string path = dir_.File("short.bin");
  auto data = WriteFile(path, (5 << 20) + 77);
  FaultPlan plan;
  plan.short_every = 1;
  auto h = Make(plan, 2);
  std::vector<uint8_t> back(data.size());
  auto n = h->Pread(path, back.data(), back.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_EQ(back, data);
}

TEST_P(AioFaultTest, ResumesShortWritesAndEagain) {
  const std::string path = dir_.File("shortw.bin");
  auto data = ::strata::testing::RandomBytes((3 << 20) + 5, ::strata::testing::TestSeed());
  FaultPlan plan;
  plan.short_every = 2;
  plan.eagain_every = 3;
  auto h = Make(plan);
  // Unaligned buffer: exercises the bounce path under faults too.
  std::vector<uint8_t> src(data.size() + 1);
  std::memcpy(src.data() + 1, data.data(), data.size());
  ASSERT_TRUE(h->Pwrite(path, src.data() + 1, data.size(), 0).ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(h->Pread(path, back.data(), back.size(), 0).ok());
  EXPECT_EQ(back, data);
}

TEST_P(AioFaultTest, FinishesAnUnalignedShortRemainderWithBufferedIo) {
  const std::string path = dir_.File("ragged.bin");
  auto data = WriteFile(path, (3 << 20) + 4096);
  FaultPlan plan;
  plan.short_unaligned_every = 1;
  auto h = Make(plan);
  std::vector<uint8_t> back(data.size());
  auto n = h->Pread(path, back.data(), back.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(back, data);
  // And writes: rewrite with new data through the same faults, read back clean.
  auto fresh = ::strata::testing::RandomBytes(data.size(), ::strata::testing::TestSeed() + 1);
  ASSERT_TRUE(h->Pwrite(path, fresh.data(), fresh.size(), 0).ok());
  auto clean = Make({});
  ASSERT_TRUE(clean->Pread(path, back.data(), back.size(), 0).ok());
  EXPECT_EQ(back, fresh);
}

TEST_P(AioFaultTest, OneFailedRequestDoesNotDisturbOthersInFlight) {
  const std::string path = dir_.File("mixed.bin");
  auto data = WriteFile(path, 8 << 20);
  FaultPlan plan;
  plan.eio_every = 5;
  plan.max_faults = 1;
  auto h = Make(plan);
  std::vector<std::vector<uint8_t>> back(8, std::vector<uint8_t>(1 << 20));
  std::vector<AioFuture> fs;
  for (int i = 0; i < 8; ++i) fs.push_back(h->SubmitRead(path, back[i].data(), 1 << 20, i << 20));
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    auto n = fs[i].Wait();
    if (!n.ok()) {
      ++failed;
      EXPECT_THAT(n, StatusIs(StatusCode::kIoError,
                              AllOf(HasSubstr("mixed.bin"), HasSubstr("Input/output error"))));
      continue;
    }
    EXPECT_EQ(0, std::memcmp(back[i].data(), data.data() + (size_t(i) << 20), 1 << 20)) << i;
  }
  EXPECT_EQ(failed, 1);
}

// Polls until every future is ready or `limit` passes (a hang guard, not a timing assertion).
bool AllReadyWithin(const std::vector<AioFuture>& fs, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (const AioFuture& f : fs) {
    while (!f.ready()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return true;
}

TEST_P(AioFaultTest, LastingReapErrorCompletesEveryWaiterAndTheHandleCanBeDestroyed) {
  const std::string path = dir_.File("broken.bin");
  auto data = WriteFile(path, 8 << 20);
  FaultPlan plan;
  plan.reap_error_after = 2;  // the ring breaks for good while pieces are in flight
  auto h = Make(plan, 2);
  ASSERT_NE(h, nullptr);
  // Heap-held so that, should the handle hang, its threads never touch freed memory.
  auto* back = new std::vector<std::vector<uint8_t>>(8, std::vector<uint8_t>(1 << 20));
  std::vector<AioFuture> fs;
  for (int i = 0; i < 8; ++i) {
    fs.push_back(h->SubmitRead(path, (*back)[i].data(), 1 << 20, uint64_t(i) << 20));
  }
  if (!AllReadyWithin(fs, std::chrono::seconds(60))) {
    (void)h.release();  // its threads are stuck: leave them (and the buffers) alone
    FAIL() << "a waiter did not return after a lasting reap error";
  }
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    auto n = fs[i].Wait();
    if (n.ok()) {
      EXPECT_EQ(0, std::memcmp((*back)[i].data(), data.data() + (size_t(i) << 20), 1 << 20));
      continue;
    }
    ++failed;
    EXPECT_THAT(n, AnyOf(StatusIs(StatusCode::kIoError, HasSubstr("aio reap")),
                         StatusIs(StatusCode::kAborted, HasSubstr("torn down"))));
  }
  EXPECT_GT(failed, 0);
  // The engine is gone: a new request fails at once, saying why.
  std::vector<uint8_t> more(1 << 20);
  EXPECT_THAT(h->Pread(path, more.data(), more.size(), 0),
              StatusIs(StatusCode::kAborted, HasSubstr("lasting reap error")));
  h.reset();  // returns: no thread waits for completions that cannot come
  delete back;
}

INSTANTIATE_TEST_SUITE_P(Engines, AioFaultTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kLibaio),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

}  // namespace
}  // namespace strata
