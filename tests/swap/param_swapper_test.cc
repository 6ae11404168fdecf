#include "swap/param_swapper.h"

#include <cstring>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::FillRandom;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ParamSwapperTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override { STRATA_AIO_OR_SKIP(GetParam()); }
  std::unique_ptr<AioHandle> MakeAio(testing::FaultPlan plan = {}) {
    AioOptions o;
    o.engine = GetParam();
    o.thread_count = 2;
    o.block_size = 256 << 10;
    IoEngineKind kind = GetParam();
    o.engine_factory = [plan, kind](
                           int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(kind, eo));
      return std::unique_ptr<IoEngine>(new testing::FaultyEngine(std::move(real), plan));
    };
    return std::move(AioHandle::Create(o)).value();
  }
  ParamSwapperOptions Options() {
    ParamSwapperOptions o;
    std::filesystem::create_directories(dir_.path() / "d0");
    std::filesystem::create_directories(dir_.path() / "d1");
    o.nvme_paths = {(dir_.path() / "d0").string(), (dir_.path() / "d1").string()};
    o.element_bytes = 2;
    o.buffer_count = 4;
    o.buffer_size = 300'000;  // 600 KB per buffer, 2.4 MB in all
    o.max_in_cpu = 0;
    o.pin_memory = false;
    EXPECT_TRUE(o.checksums) << "checksums are on by default";
    return o;
  }
  ScratchDir dir_;
};

TEST_P(ParamSwapperTest, MoreParamsThanBuffersRoundTripThroughNvme) {
  auto aio = MakeAio();
  auto sw = std::move(ParamSwapper::Create(Options(), aio.get())).value();
  const uint64_t seed = TestSeed();
  std::vector<size_t> numels;
  for (int i = 0; i < 24; ++i) numels.push_back(1 + (seed * (i + 7) + i * 104729) % 500'000);
  std::vector<std::vector<uint8_t>> truth(numels.size());
  for (size_t i = 0; i < numels.size(); ++i) {
    ASSERT_TRUE(sw->Register(static_cast<ParamId>(i), numels[i]).ok());
    auto buf = sw->Allocate(static_cast<ParamId>(i));
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    FillRandom(buf->data(), buf->size(), seed + i);
    truth[i].assign(buf->begin(), buf->end());
    ParamId id = static_cast<ParamId>(i);
    ASSERT_TRUE(sw->SwapOut({&id, 1}).ok());
    ASSERT_TRUE(sw->Release({&id, 1}).ok());  // waits for the write, frees the buffer
  }
  EXPECT_EQ(sw->stats().buffer_bytes_used, 0u);
  // Swap back in, two at a time (what fits), in reverse order.
  for (int i = static_cast<int>(numels.size()) - 1; i >= 1; i -= 2) {
    ParamId ids[2] = {i, i - 1};
    Status s = sw->SwapIn(ids);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(sw->WaitIn(ids).ok());
    for (ParamId id : ids) {
      auto d = sw->Data(id);
      ASSERT_TRUE(d.ok());
      ASSERT_TRUE(std::equal(d->begin(), d->end(), truth[id].begin(), truth[id].end()))
          << "param " << id;
    }
    ASSERT_TRUE(sw->Release(ids).ok());
  }
  EXPECT_LE(sw->stats().buffer_bytes_peak, sw->stats().buffer_bytes_capacity);
}

TEST_P(ParamSwapperTest, FullBuffersAreOutOfMemoryAndStartNothing) {
  auto aio = MakeAio();
  auto sw = std::move(ParamSwapper::Create(Options(), aio.get())).value();
  std::vector<ParamId> ids;
  for (ParamId i = 0; i < 6; ++i) {
    ASSERT_TRUE(sw->Register(i, 280'000).ok());
    ASSERT_TRUE(sw->Allocate(i).ok() || i >= 4);
    ids.push_back(i);
  }
  // Four fit (one per buffer's worth); write them and release.
  for (ParamId i = 0; i < 4; ++i) {
    ASSERT_TRUE(sw->SwapOut({&i, 1}).ok());
    ASSERT_TRUE(sw->Release({&i, 1}).ok());
  }
  EXPECT_THAT(sw->SwapIn(std::span<const ParamId>(ids.data(), 5)),
              StatusIs(StatusCode::kOutOfMemory, HasSubstr("swap buffers full")));
  EXPECT_EQ(sw->stats().buffer_bytes_used, 0u);  // nothing was started
  // A parameter larger than every buffer together is refused at registration.
  EXPECT_THAT(sw->Register(100, 10'000'000),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("param 100"), HasSubstr("buffer_count"))));
  EXPECT_THAT(sw->Register(1, 10),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("param 1 is already registered")));
  EXPECT_THAT(sw->Data(42), StatusIs(StatusCode::kNotFound, HasSubstr("param 42")));
}

TEST_P(ParamSwapperTest, MaxInCpuKeepsTheFirstParamsInMemory) {
  auto aio = MakeAio();
  auto o = Options();
  o.max_in_cpu = 1000;
  auto sw = std::move(ParamSwapper::Create(o, aio.get())).value();
  ASSERT_TRUE(sw->Register(1, 600).ok());
  ASSERT_TRUE(sw->Register(2, 300).ok());
  ASSERT_TRUE(sw->Register(3, 300).ok());  // would exceed 1000: NVMe
  EXPECT_FALSE(sw->on_nvme(1));
  EXPECT_FALSE(sw->on_nvme(2));
  EXPECT_TRUE(sw->on_nvme(3));
  auto d = sw->Data(1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), 1200u);
  EXPECT_EQ(sw->stats().params_in_cpu, 2u);
}

TEST_P(ParamSwapperTest, AdoptCpuStorageMovesTheBytesAndRefusesNvmeParams) {
  auto aio = MakeAio();
  auto o = Options();
  o.max_in_cpu = 1000;
  auto sw = std::move(ParamSwapper::Create(o, aio.get())).value();
  ASSERT_TRUE(sw->Register(1, 600).ok());
  ASSERT_TRUE(sw->Register(3, 700).ok());  // past max_in_cpu: NVMe
  const std::vector<uint8_t> a = testing::RandomBytes(600 * o.element_bytes, 71);
  std::memcpy(sw->Data(1)->data(), a.data(), a.size());
  std::vector<uint8_t> storage(a.size(), 0);
  ASSERT_TRUE(sw->AdoptCpuStorage(1, storage.data()).ok());
  EXPECT_EQ(storage, a);
  auto d = sw->Data(1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->data(), storage.data());
  EXPECT_EQ(d->size(), a.size());
  std::vector<uint8_t> other(700 * o.element_bytes);
  EXPECT_THAT(sw->AdoptCpuStorage(3, other.data()),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("param 3")));
}

TEST_P(ParamSwapperTest, ConcurrentSwapInsFromTwoThreads) {
  auto aio = MakeAio();
  auto o = Options();
  o.buffer_size = 2'000'000;
  auto sw = std::move(ParamSwapper::Create(o, aio.get())).value();
  const uint64_t seed = TestSeed();
  constexpr int kParams = 16;
  std::vector<std::vector<uint8_t>> truth(kParams);
  for (ParamId i = 0; i < kParams; ++i) {
    ASSERT_TRUE(sw->Register(i, 100'000 + i * 1000).ok());
    auto b = *sw->Allocate(i);
    FillRandom(b.data(), b.size(), seed ^ i);
    truth[i].assign(b.begin(), b.end());
    ASSERT_TRUE(sw->SwapOut({&i, 1}).ok());
  }
  std::vector<ParamId> all(kParams);
  for (int i = 0; i < kParams; ++i) all[i] = i;
  ASSERT_TRUE(sw->Release(all).ok());
  auto worker = [&](int parity) {
    for (int round = 0; round < 3; ++round) {
      for (ParamId i = parity; i < kParams; i += 2) {
        ASSERT_TRUE(sw->SwapIn({&i, 1}).ok());
        ASSERT_TRUE(sw->WaitIn({&i, 1}).ok());
        auto d = *sw->Data(i);
        ASSERT_TRUE(std::equal(d.begin(), d.end(), truth[i].begin(), truth[i].end()));
        ASSERT_TRUE(sw->Release({&i, 1}).ok());
      }
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
}

TEST_P(ParamSwapperTest, EnospcAtSwapOutIsReportedAndTheDataStaysInMemory) {
  testing::FaultPlan plan;
  plan.enospc_every = 1;
  plan.armed = std::make_shared<std::atomic<bool>>(true);
  auto aio = MakeAio(plan);
  auto sw = std::move(ParamSwapper::Create(Options(), aio.get())).value();
  ASSERT_TRUE(sw->Register(7, 200'000).ok());
  auto b = *sw->Allocate(7);
  FillRandom(b.data(), b.size(), TestSeed());
  std::vector<uint8_t> truth(b.begin(), b.end());
  ParamId id = 7;
  ASSERT_TRUE(sw->SwapOut({&id, 1}).ok());  // async: the error comes with the wait
  Status s = sw->Release({&id, 1});
  EXPECT_THAT(s, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr("param 7"), HasSubstr("No space left on device"))));
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  auto d = sw->Data(7);
  ASSERT_TRUE(d.ok()) << "the buffer must be kept after a failed swap-out";
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
  // Releasing again does not drop the only copy.
  EXPECT_THAT(sw->Release({&id, 1}), StatusIs(StatusCode::kFailedPrecondition,
                                              AllOf(HasSubstr("param 7"), HasSubstr("only copy"))));
  d = sw->Data(7);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
  // Once the disk has room again, a swap-out succeeds, the buffer can go, and the parameter
  // reads back right (the failed write left nothing behind that could pass for data).
  plan.armed->store(false);
  ASSERT_THAT(sw->SwapOut({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->Release({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->SwapIn({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->WaitIn({&id, 1}), ::strata::testing::IsOk());
  d = sw->Data(7);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
}

// WaitOut finishes a swap-out and keeps the buffer: the bytes written are served without a read;
// a failed write is reported there and the buffer (the only copy) stays, as with Release.
TEST_P(ParamSwapperTest, WaitOutKeepsTheWrittenBufferAndReportsAFailedWrite) {
  testing::FaultPlan plan;
  plan.enospc_every = 1;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  auto aio = MakeAio(plan);
  auto sw = std::move(ParamSwapper::Create(Options(), aio.get())).value();
  ASSERT_TRUE(sw->Register(5, 250'000).ok());
  auto b = *sw->Allocate(5);
  FillRandom(b.data(), b.size(), TestSeed());
  std::vector<uint8_t> truth(b.begin(), b.end());
  ParamId id = 5;
  ASSERT_THAT(sw->SwapOut({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->WaitOut({&id, 1}), ::strata::testing::IsOk());
  EXPECT_EQ(sw->stats().bytes_read, 0u);
  EXPECT_EQ(sw->stats().buffer_bytes_used, sw->stats().buffer_bytes_peak);  // still held
  auto d = sw->Data(5);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
  // The write really reached NVMe: released and read back, the same bytes.
  ASSERT_THAT(sw->Release({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->SwapIn({&id, 1}), ::strata::testing::IsOk());
  ASSERT_THAT(sw->WaitIn({&id, 1}), ::strata::testing::IsOk());
  d = sw->Data(5);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
  EXPECT_EQ(sw->stats().bytes_read, 250'000u * 2);

  // A write that fails: WaitOut says so, the buffer stays and may not be released.
  FillRandom(d->data(), d->size(), TestSeed() + 1);
  truth.assign(d->begin(), d->end());
  plan.armed->store(true);
  ASSERT_THAT(sw->SwapOut({&id, 1}), ::strata::testing::IsOk());
  Status s = sw->WaitOut({&id, 1});
  EXPECT_THAT(s, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr("param 5"), HasSubstr("No space left on device"))));
  d = sw->Data(5);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(std::equal(d->begin(), d->end(), truth.begin(), truth.end()));
  EXPECT_THAT(sw->Release({&id, 1}), StatusIs(StatusCode::kFailedPrecondition,
                                              AllOf(HasSubstr("param 5"), HasSubstr("only copy"))));
  plan.armed->store(false);
}

// A parameter that was registered but never written has nothing on NVMe: a swap-in says so and
// leaves it on NVMe, with its buffer given back.
TEST_P(ParamSwapperTest, SwapInOfANeverWrittenParamFailsAndFreesItsBuffer) {
  auto aio = MakeAio();
  auto sw = std::move(ParamSwapper::Create(Options(), aio.get())).value();
  ASSERT_TRUE(sw->Register(3, 1000).ok());
  ParamId id = 3;
  ASSERT_THAT(sw->SwapIn({&id, 1}), ::strata::testing::IsOk());
  EXPECT_THAT(sw->WaitIn({&id, 1}),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("param 3"), HasSubstr("before it was ever written"))));
  EXPECT_EQ(sw->stats().buffer_bytes_used, 0u);
  EXPECT_THAT(sw->Data(3), StatusIs(StatusCode::kFailedPrecondition, HasSubstr("on NVMe")));
}

INSTANTIATE_TEST_SUITE_P(Engines, ParamSwapperTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kLibaio),
                         [](const auto& info) {
                           return std::string(IoEngineKindName(info.param));
                         });

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(ParamSwapperBudgetTest, ChargesBuffersToCpuAndSwapSpaceToNvme) {
  ScratchDir dir;
  auto aio = std::move(AioHandle::Create({})).value();
  TierBudget budget;
  ParamSwapperOptions o;
  o.nvme_paths = {dir.path().string()};
  o.buffer_count = 2;
  o.buffer_size = 1 << 20;
  o.max_in_cpu = 0;
  o.pin_memory = false;
  o.budget = &budget;
  {
    auto sw = std::move(ParamSwapper::Create(o, aio.get())).value();
    EXPECT_GE(budget.Stats(Tier::kCpu).current_bytes, 2u * (2u << 20));
    ASSERT_TRUE(sw->Register(1, 1000).ok());
    ASSERT_TRUE(sw->Register(2, 5000).ok());
    EXPECT_EQ(budget.Stats(Tier::kNvme).current_bytes, 4096u + 12288u);
  }
  EXPECT_EQ(budget.Stats(Tier::kCpu).current_bytes, 0u);
  EXPECT_EQ(budget.Stats(Tier::kNvme).current_bytes, 0u);
}

}  // namespace
}  // namespace strata
