// Round trips of random data through AioHandle on both engines, across sizes, offsets, buffer
// alignments, thread counts and queue depths; concurrency; errors for bad input.
#include "aio/aio_handle.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "aio/direct/aligned_buffer.h"
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

struct Config {
  IoEngineKind engine;
  int threads;
  int queue_depth;
  bool overlap;
  bool single_submit;
  size_t block;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << IoEngineKindName(c.engine) << " threads=" << c.threads << " qd=" << c.queue_depth
      << " block=" << c.block;
}

std::string Name(const ::testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  return std::string(c.engine == IoEngineKind::kIoUring ? "io_uring" : "libaio") + "_t" +
         std::to_string(c.threads) + "_qd" + std::to_string(c.queue_depth) +
         (c.overlap ? "_overlap" : "_lockstep") + (c.single_submit ? "_single" : "") + "_bs" +
         std::to_string(c.block / 1024) + "k";
}

class AioHandleTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    STRATA_AIO_OR_SKIP(GetParam().engine);
    AioOptions o;
    o.engine = GetParam().engine;
    o.thread_count = GetParam().threads;
    o.queue_depth = GetParam().queue_depth;
    o.overlap_events = GetParam().overlap;
    o.single_submit = GetParam().single_submit;
    o.block_size = GetParam().block;
    auto h = AioHandle::Create(o);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handle_ = std::move(h).value();
  }

  // Writes `size` random bytes at `offset` from a buffer at `buf_shift` bytes past a 2 MiB
  // boundary, reads them back into a differently shifted buffer, compares.
  void RoundTrip(size_t size, uint64_t offset, size_t buf_shift, uint64_t seed) {
    SCOPED_TRACE("size " + std::to_string(size) + " offset " + std::to_string(offset) + " shift " +
                 std::to_string(buf_shift));
    auto wbuf = AlignedBuffer::Allocate(size + buf_shift + 8);
    auto rbuf = AlignedBuffer::Allocate(size + buf_shift + 8);
    ASSERT_TRUE(wbuf.ok() && rbuf.ok());
    uint8_t* w = wbuf->bytes() + buf_shift;
    uint8_t* r = rbuf->bytes() + (buf_shift ? buf_shift + 3 : 0);
    FillRandom(w, size, seed);
    std::memset(r, 0xAB, size);
    const std::string path = dir_.File("rt.bin");
    auto wn = handle_->Pwrite(path, w, size, offset);
    ASSERT_TRUE(wn.ok()) << wn.status().ToString();
    EXPECT_EQ(*wn, size);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_GE(static_cast<uint64_t>(st.st_size), offset + size);
    auto rn = handle_->Pread(path, r, size, offset);
    ASSERT_TRUE(rn.ok()) << rn.status().ToString();
    EXPECT_EQ(*rn, size);
    ASSERT_EQ(std::memcmp(w, r, size), 0);
  }

  ScratchDir dir_;
  std::unique_ptr<AioHandle> handle_;
};

TEST_P(AioHandleTest, RoundTripsRandomDataAcrossSizesOffsetsAndAlignments) {
  uint64_t seed = TestSeed();
  const size_t sizes[] = {1, 4095, 4096, (1 << 20) + 13, 3 * (1 << 20)};
  const uint64_t offsets[] = {0, 13, 4096, (1 << 20) + 512};
  for (size_t size : sizes) {
    for (uint64_t off : offsets) {
      for (size_t shift : {size_t{0}, size_t{5}}) RoundTrip(size, off, shift, seed++);
    }
  }
}

TEST_P(AioHandleTest, RoundTrips64MiB) { RoundTrip(64 << 20, 8192, 0, TestSeed() + 99); }

TEST_P(AioHandleTest, ExactFileSizeForUnalignedTail) {
  const std::string path = dir_.File("tail.bin");
  auto data = ::strata::testing::RandomBytes((1 << 20) + 13, TestSeed());
  ASSERT_TRUE(handle_->Pwrite(path, data.data(), data.size(), 0).ok());
  EXPECT_EQ(std::filesystem::file_size(path), data.size());
}

TEST_P(AioHandleTest, ManyConcurrentAsyncRequestsFromSeveralThreads) {
  constexpr int kThreads = 3, kPerThread = 12;
  const size_t size = 256 * 1024 + 100;
  const std::string path = dir_.File("conc.bin");
  std::vector<std::vector<uint8_t>> data(kThreads * kPerThread);
  uint64_t seed = TestSeed();
  for (size_t i = 0; i < data.size(); ++i) data[i] = ::strata::testing::RandomBytes(size, seed + i);
  auto work = [&](int t) {
    std::vector<AioFuture> fs;
    for (int k = 0; k < kPerThread; ++k) {
      int i = t * kPerThread + k;
      fs.push_back(handle_->SubmitWrite(path, data[i].data(), size, uint64_t(i) * size));
    }
    for (auto& f : fs) EXPECT_TRUE(f.Wait().ok());
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(work, t);
  for (auto& t : ts) t.join();
  // Read all back in one batch.
  std::vector<std::vector<uint8_t>> back(data.size(), std::vector<uint8_t>(size));
  std::vector<AioRequest> reqs;
  for (size_t i = 0; i < data.size(); ++i) {
    reqs.push_back({IoOp::kRead, path, back[i].data(), size, uint64_t(i) * size});
  }
  auto n = handle_->SubmitBatch(reqs).Wait();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size * data.size());
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(back[i], data[i]) << "request " << i;
}

TEST_P(AioHandleTest, RegisteredBufferRoundTripsWhenSupported) {
  auto buf = AlignedBuffer::Allocate(8 << 20);
  ASSERT_TRUE(buf.ok());
  auto reg = handle_->RegisterBuffer(buf->data(), buf->size());
  if (!reg.ok()) GTEST_SKIP() << "no registered buffers: " << reg.status().ToString();
  FillRandom(buf->data(), buf->size(), TestSeed());
  std::vector<uint8_t> copy(buf->bytes(), buf->bytes() + buf->size());
  const std::string path = dir_.File("reg.bin");
  ASSERT_TRUE(handle_->Pwrite(path, buf->data(), buf->size(), 0).ok());
  std::memset(buf->data(), 0, buf->size());
  ASSERT_TRUE(handle_->Pread(path, buf->data(), buf->size(), 0).ok());
  ASSERT_EQ(std::memcmp(copy.data(), buf->data(), buf->size()), 0);
}

TEST_P(AioHandleTest, CloseThenReopenSeesData) {
  const std::string path = dir_.File("reopen.bin");
  auto data = ::strata::testing::RandomBytes(1 << 20, TestSeed());
  ASSERT_TRUE(handle_->Pwrite(path, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(handle_->Sync(path).ok());
  ASSERT_TRUE(handle_->Close(path).ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(handle_->Pread(path, back.data(), back.size(), 0).ok());
  EXPECT_EQ(back, data);
}

TEST_P(AioHandleTest, ReadPastEndOfFileIsAnErrorNotShortData) {
  const std::string path = dir_.File("short.bin");
  auto data = ::strata::testing::RandomBytes(10000, TestSeed());
  ASSERT_TRUE(handle_->Pwrite(path, data.data(), data.size(), 0).ok());
  std::vector<uint8_t> back(3 << 20);
  EXPECT_THAT(handle_->Pread(path, back.data(), back.size(), 0),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("short.bin"), HasSubstr("file ends at offset 10000"))));
}

TEST_P(AioHandleTest, MissingFileIsNotFoundNamingPath) {
  std::vector<uint8_t> b(4096);
  EXPECT_THAT(handle_->Pread(dir_.File("nope.bin"), b.data(), b.size(), 0),
              StatusIs(StatusCode::kNotFound, HasSubstr("nope.bin")));
  EXPECT_THAT(handle_->Open(dir_.File("nope.bin"), AioOpenMode::kRead),
              StatusIs(StatusCode::kNotFound, HasSubstr("nope.bin")));
}

TEST_P(AioHandleTest, OpenedFileRoundTripsAndBatchesWithoutPaths) {
  auto file = handle_->Open(dir_.File("opened.bin"), AioOpenMode::kReadWrite);
  ASSERT_THAT(file, ::strata::testing::IsOk());
  EXPECT_TRUE(file->writable());
  auto data = ::strata::testing::RandomBytes((2 << 20) + 77, TestSeed());
  auto n = file->Pwrite(data.data(), data.size(), 13);
  ASSERT_THAT(n, ::strata::testing::IsOk());
  EXPECT_EQ(*n, data.size());
  ASSERT_THAT(file->Sync(), ::strata::testing::IsOk());
  std::vector<uint8_t> back(data.size());
  ASSERT_THAT(file->Pread(back.data(), back.size(), 13), ::strata::testing::IsOk());
  EXPECT_EQ(back, data);
  // Two halves in one batch through the AioFile, next to a path-based request on the same file.
  std::vector<uint8_t> a(1 << 20), b(data.size() - (1 << 20));
  std::vector<AioRequest> reqs(2);
  reqs[0] = {IoOp::kRead, "", a.data(), a.size(), 13, &*file};
  reqs[1] = {IoOp::kRead, file->path(), b.data(), b.size(), 13 + a.size()};
  ASSERT_THAT(handle_->SubmitBatch(reqs).Wait(), ::strata::testing::IsOk());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), data.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), data.begin() + a.size()));
}

TEST_P(AioHandleTest, FileOpenedForReadingRefusesWritesAndEmptyFileRefusesAll) {
  const std::string path = dir_.File("ro.bin");
  auto data = ::strata::testing::RandomBytes(8192, TestSeed());
  ASSERT_THAT(handle_->Pwrite(path, data.data(), data.size(), 0), ::strata::testing::IsOk());
  auto ro = handle_->Open(path, AioOpenMode::kRead);
  ASSERT_THAT(ro, ::strata::testing::IsOk());
  EXPECT_THAT(ro->Pwrite(data.data(), data.size(), 0),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("ro.bin"), HasSubstr("opened for reading"))));
  std::vector<AioRequest> reqs = {{IoOp::kWrite, "", data.data(), data.size(), 0, &*ro}};
  EXPECT_THAT(handle_->SubmitBatch(reqs).Wait(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("opened for reading")));
  AioFile empty;
  EXPECT_THAT(empty.Pread(data.data(), data.size(), 0),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("empty AioFile")));
  EXPECT_THAT(
      ro->Pread(nullptr, 10, 0),
      StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("ro.bin"), HasSubstr("null buffer"))));
}

INSTANTIATE_TEST_SUITE_P(
    Engines, AioHandleTest,
    ::testing::Values(Config{IoEngineKind::kIoUring, 1, 8, true, false, 1 << 20},
                      Config{IoEngineKind::kIoUring, 3, 4, true, false, 256 << 10},
                      Config{IoEngineKind::kIoUring, 2, 2, false, true, 64 << 10},
                      Config{IoEngineKind::kLibaio, 1, 8, true, false, 1 << 20},
                      Config{IoEngineKind::kLibaio, 3, 4, true, false, 256 << 10},
                      Config{IoEngineKind::kLibaio, 2, 1, false, true, 4 << 10}),
    Name);

TEST(AioHandleManyFilesTest, MoreFilesThanFixedFileSlotsKeepTheirOwnData) {
  // io_uring registers files in a 256-slot table; beyond it requests use plain descriptors.
  // Reading file 0 and file 300 in one batch must not confuse the two.
  STRATA_AIO_OR_SKIP(IoEngineKind::kIoUring);
  ScratchDir dir;
  AioOptions o;
  o.engine = IoEngineKind::kIoUring;
  auto created = AioHandle::Create(o);
  ASSERT_THAT(created, ::strata::testing::IsOk());
  auto h = std::move(created).value();
  constexpr int kFiles = 300;
  constexpr size_t kBytes = 8192;
  std::vector<std::vector<uint8_t>> data;
  std::vector<AioRequest> writes, reads;
  std::vector<std::vector<uint8_t>> back(kFiles, std::vector<uint8_t>(kBytes));
  for (int i = 0; i < kFiles; ++i) {
    data.push_back(::strata::testing::RandomBytes(kBytes, TestSeed() + i));
    writes.push_back({IoOp::kWrite, dir.File("f" + std::to_string(i)), data[i].data(), kBytes, 0});
    reads.push_back({IoOp::kRead, dir.File("f" + std::to_string(i)), back[i].data(), kBytes, 0});
  }
  ASSERT_TRUE(h->SubmitBatch(writes).Wait().ok());
  std::swap(reads[1], reads[kFiles - 1]);  // interleave early and late files in each batch
  ASSERT_TRUE(h->SubmitBatch(reads).Wait().ok());
  for (int i = 0; i < kFiles; ++i) ASSERT_EQ(back[i], data[i]) << "file " << i;
}

TEST(AioHandleOptionsTest, RejectsBadOptionsWithRange) {
  AioOptions o;
  o.block_size = 1000;
  EXPECT_THAT(AioHandle::Create(o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("block_size 1000"), HasSubstr("multiple of 4096"))));
  o = AioOptions();
  o.queue_depth = 0;
  EXPECT_THAT(AioHandle::Create(o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("queue_depth 0"), HasSubstr("[1, 1024]"))));
  o = AioOptions();
  o.thread_count = 100;
  EXPECT_THAT(AioHandle::Create(o),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("thread_count) 100"), HasSubstr("[1, 64]"))));
}

TEST(AioHandleOptionsTest, WriteIntoUnwritableDirectoryNamesPath) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not apply";
  ScratchDir dir;
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  auto h = AioHandle::Create({});
  ASSERT_TRUE(h.ok());
  std::vector<uint8_t> b(4096);
  auto n = (*h)->Pwrite(dir.File("x.bin"), b.data(), b.size(), 0);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
  EXPECT_THAT(
      n, StatusIs(StatusCode::kIoError, AllOf(HasSubstr("x.bin"), HasSubstr("Permission denied"))));
}

}  // namespace
}  // namespace strata
