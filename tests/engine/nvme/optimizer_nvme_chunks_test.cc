// Swap chunks (strata.swap_chunk_bytes, engine/nvme/swap_chunks.h): the NVMe optimizer steps a
// sub-group larger than the chunk (and not a multiple of it) chunk by chunk, bitwise as the CPU
// tier steps the whole sub-group, through the pipelined step and the per-chunk asynchronous path;
// its pinned swap buffers are buffer_count x the chunk whatever sub_group_size is; and a fault
// on a chunk's read or write fails the step naming the swap file and the chunk's offset in it.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/nvme/optimizer_nvme.h"
#include "engine/nvme/swap_chunks.h"
#include "engine/optim/optimizer_state.h"
#include "tests/aio/faulty_engine.h"
#include "tests/engine/nvme/nvme_state_helpers.h"
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

constexpr char kSwapFile[] = "strata-optimizer-rank0.swap";
// 120000 bytes: 9216 elements a chunk (12 B each, whole 4 KiB pages of fp32 a part).
constexpr uint64_t kChunkBytes = 120'000;

PartitionLayout MakeLayout() {
  const std::vector<size_t> numels = {70'000, 3, 70'000, 70'001, 5'000};
  return PartitionLayout::Create(numels, 1, 0, 64).value();
}

void Fill(float* out, size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  for (size_t i = 0; i < n; ++i) out[i] = d(rng);
}

// The bytes one chunk of `numel` elements takes on disk and in a buffer: three fp32 parts, each
// padded to a 4 KiB page for O_DIRECT.
uint64_t PaddedStateBytes(uint64_t numel) { return 3 * ((numel * 4 + 4095) / 4096 * 4096); }

// A chunk is the most elements whose padded state fits in swap_chunk_bytes (one more would not),
// a multiple of the kernels' 64-element grain; below three pages (12 KiB) it is one grain's
// multiple, at least one grain, and may pad past the chunk.
TEST(NvmeChunksTest, ChunkNumelIsTheMostWhosePaddedStateFitsTheChunk) {
  for (const uint64_t bytes : {uint64_t{12} << 10, uint64_t{120'000}, uint64_t{1} << 20,
                               uint64_t{2} << 20, (uint64_t{3} << 20) + 5, uint64_t{8} << 20,
                               uint64_t{10} << 20, uint64_t{64} << 20, (uint64_t{64} << 20) + 1}) {
    const uint64_t n = SwapChunkNumel(bytes);
    EXPECT_EQ(n % 64, 0u) << bytes;
    EXPECT_LE(PaddedStateBytes(n), bytes) << bytes;
    EXPECT_GT(PaddedStateBytes(n + 1), bytes) << bytes;
  }
  // Under three pages no chunk fits its padding: 1000 elements' worth, in whole grains.
  EXPECT_EQ(SwapChunkNumel(12'000), 960u);
  EXPECT_EQ(SwapChunkNumel(100), 64u);  // never below one grain
}

// The CPU tier steps one sub-group of the whole partition (sub_group_size 1e9); the NVMe state
// steps the same partition in 9216-element chunks (the last one short): the same bits for the
// master, the moments and the bf16 copy-out, through Step and through the per-chunk slots.
TEST(NvmeChunksTest, ChunkedStepsEqualTheCpuTierSteppingWholeSubGroupsBitwise) {
  ScratchDir dir;
  const PartitionLayout layout = MakeLayout();
  const std::vector<SubGroup> whole = layout.SubGroups(1'000'000'000);
  ASSERT_EQ(whole.size(), 1u);
  const std::vector<SubGroup> chunks = layout.SplitSubGroups(whole, SwapChunkNumel(kChunkBytes));
  const size_t n = layout.partition_numel();
  ASSERT_GT(chunks.size(), 20u);
  ASSERT_NE(n % SwapChunkNumel(kChunkBytes), 0u) << "the sub-group should not be a multiple";

  auto ref = nvme_test::CpuTierReference(layout);
  ASSERT_NE(ref, nullptr);
  NvmeOptimizerStateOptions o = nvme_test::Options(dir, 3, /*checksums=*/true);
  o.pipeline_read = o.pipeline_write = true;
  auto nvme = NvmeOptimizerState::Create(layout, chunks, o, nullptr, nullptr);
  ASSERT_THAT(nvme.status(), IsOk());
  NvmeOptimizerState& s = **nvme;
  std::mt19937_64 rng(TestSeed());
  ASSERT_THAT(nvme_test::SeedBoth(*ref, s, n, rng), IsOk());

  std::vector<uint8_t> copy_ref(n * 2, 0xAB), copy_nvme(n * 2, 0xCD);
  const Hyperparams hp = nvme_test::TestHyperparams();
  for (int step = 1; step <= 3; ++step) {
    Fill(ref->grad(), n, rng, 0.1f);
    std::memcpy(s.grad(), ref->grad(), n * sizeof(float));
    const float scale = 0.25f * static_cast<float>(step);
    ASSERT_THAT(ref->StepSubGroup(whole[0], step, hp, scale, copy_ref.data(), DType::kBFloat16),
                IsOk());
    if (step == 2) {
      // As the overlapped step's worker: every other chunk acquired, updated in its slot and
      // written back lazily; the step does the rest.
      ASSERT_THAT(s.PrepareSubGroupSteps(), IsOk());
      std::vector<char> done(chunks.size(), 0);
      for (int i = static_cast<int>(chunks.size()) - 1; i >= 0; i -= 2) {
        Result<OptimizerSwapper::StateView> v = s.AcquireState(i, {}, true);
        ASSERT_THAT(v.status(), IsOk());
        ASSERT_THAT(s.UpdateSubGroup(i, step, hp, scale, v->params, v->exp_avg, v->exp_avg_sq,
                                     copy_nvme.data(), DType::kBFloat16),
                    IsOk());
        ASSERT_THAT(s.WriteBack(i), IsOk());
        done[static_cast<size_t>(i)] = 1;
      }
      ASSERT_THAT(s.StepExcept(step, hp, scale, copy_nvme.data(), DType::kBFloat16, done), IsOk());
    } else {
      ASSERT_THAT(s.Step(step, hp, scale, copy_nvme.data(), DType::kBFloat16), IsOk());
    }
    ASSERT_EQ(0, std::memcmp(copy_ref.data(), copy_nvme.data(), copy_ref.size()))
        << "bf16 copy-out differs at step " << step;
    ref->ZeroGrad();
    s.ZeroGrad();
  }
  EXPECT_EQ(nvme_test::StateDiffers(s, *ref, n), "");
}

// The pinned bytes of an NvmeOptimizerState stepping `chunks` of MakeLayout's partition once
// through `buffers` swap buffers: its cpu_bytes (the swap buffers and the gradient partition,
// the stage being freed by the step) less the gradient partition. Fails the test (returns 0) on
// an error.
uint64_t SwapBytesAfterAStep(const PartitionLayout& layout, const std::vector<SubGroup>& chunks,
                             size_t buffers) {
  const size_t n = layout.partition_numel();
  ScratchDir dir;
  auto s = NvmeOptimizerState::Create(layout, chunks, nvme_test::Options(dir, buffers, true),
                                      nullptr, nullptr);
  EXPECT_THAT(s.status(), IsOk());
  if (!s.ok()) return 0;
  std::mt19937_64 rng(TestSeed());
  std::vector<float> master(n);
  Fill(master.data(), n, rng, 1.0f);
  EXPECT_THAT((*s)->WriteMaster(0, master), IsOk());
  EXPECT_THAT((*s)->Step(1, nvme_test::TestHyperparams(), 1.0f, nullptr, DType::kBFloat16), IsOk());
  return (*s)->cpu_bytes() - n * sizeof(float);
}

// Pinned swap buffers: buffer_count x one chunk's state (three 4 KiB-aligned parts), the same for
// sub_group_size 20000, 100000 and 1e9. The sub-groups themselves, unchunked, would need the
// largest of them buffer_count times.
TEST(NvmeChunksTest, PinnedSwapBuffersDoNotGrowWithSubGroupSize) {
  const PartitionLayout layout = MakeLayout();
  const size_t chunk = SwapChunkNumel(kChunkBytes);
  const uint64_t part = (chunk * 4 + 4095) / 4096 * 4096;
  constexpr size_t kBuffers = 4;
  std::vector<uint64_t> buffers;
  for (const int64_t sub_group_size : {20'000, 100'000, 1'000'000'000}) {
    const std::vector<SubGroup> groups = layout.SubGroups(static_cast<size_t>(sub_group_size));
    const uint64_t swap =
        SwapBytesAfterAStep(layout, layout.SplitSubGroups(groups, chunk), kBuffers);
    buffers.push_back(swap);
    size_t largest = 0;
    for (const SubGroup& g : groups) largest = std::max(largest, g.flat_end - g.flat_begin);
    if (largest > chunk) {
      EXPECT_LT(swap, kBuffers * 12 * uint64_t{largest}) << sub_group_size;
    }
  }
  ASSERT_EQ(buffers.size(), 3u);
  // (The gradient partition's allocation is rounded up to a 4 KiB page.)
  EXPECT_GE(buffers[0], kBuffers * 3 * part);
  EXPECT_LT(buffers[0], kBuffers * 3 * part + 4096);
  EXPECT_EQ(buffers[1], buffers[0]);
  EXPECT_EQ(buffers[2], buffers[0]);
}

struct FaultRig {
  PartitionLayout layout;
  std::vector<SubGroup> chunks;
  std::unique_ptr<NvmeOptimizerState> nvme;
};

FaultRig MakeFaultRig(const ScratchDir& dir, const FaultPlan& plan) {
  FaultRig r;
  r.layout = MakeLayout();
  r.chunks =
      r.layout.SplitSubGroups(r.layout.SubGroups(1'000'000'000), SwapChunkNumel(kChunkBytes));
  NvmeOptimizerStateOptions o = nvme_test::Options(dir, 2, true);
  o.pipeline_read = o.pipeline_write = true;
  o.aio.engine_factory = [plan](int,
                                const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new FaultyEngine(std::move(real), plan));
  };
  r.nvme = std::move(NvmeOptimizerState::Create(r.layout, r.chunks, o, nullptr, nullptr)).value();
  std::mt19937_64 rng(TestSeed());
  const size_t n = r.layout.partition_numel();
  std::vector<float> master(n);
  Fill(master.data(), n, rng, 1.0f);
  Fill(r.nvme->grad(), n, rng, 0.01f);
  EXPECT_THAT(r.nvme->WriteMaster(0, master), IsOk());
  EXPECT_THAT(r.nvme->Flush(), IsOk());
  return r;
}

// The file offset a message names after "<file> @ " (-1 when there is none).
long long OffsetAfter(const std::string& message, const std::string& file) {
  const size_t at = message.find(file + " @ ");
  if (at == std::string::npos) return -1;
  return std::strtoll(message.c_str() + at + file.size() + 3, nullptr, 10);
}

// strata.swap_chunk_bytes bounds what the buffers pin: a 2 MiB chunk gives buffers of at most
// 2 MiB. (Before, a chunk's padded parts came to 2 MiB + 4 KiB and the pool, allocating in 2 MiB
// pages past 2 MiB, pinned 4 MiB a buffer.)
TEST(NvmeChunksTest, PinnedSwapBuffersAreBufferCountTimesTheChunk) {
  const PartitionLayout layout = MakeLayout();
  const size_t n = layout.partition_numel();
  constexpr uint64_t kChunk = uint64_t{2} << 20;
  constexpr size_t kBuffers = 4;
  const size_t chunk = SwapChunkNumel(kChunk);
  ASSERT_LT(chunk, n);  // at least one full chunk
  const uint64_t swap = SwapBytesAfterAStep(
      layout, layout.SplitSubGroups(layout.SubGroups(1'000'000'000), chunk), kBuffers);
  // (The gradient partition's allocation is rounded up to a 4 KiB page.)
  EXPECT_GE(swap, kBuffers * PaddedStateBytes(chunk));
  EXPECT_LT(swap, kBuffers * kChunk + 4096);
}

TEST(NvmeChunksTest, ReadErrorOnALaterChunkFailsTheStepNamingFileAndItsOffset) {
  ScratchDir dir;
  FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  plan.eio_every = 5;  // a read past the first chunks
  plan.only_reads = true;
  FaultRig r = MakeFaultRig(dir, plan);
  plan.armed->store(true);
  const Status s = r.nvme->Step(1, nvme_test::TestHyperparams(), 1.0f, nullptr, DType::kBFloat16);
  plan.armed->store(false);
  ASSERT_THAT(
      s, StatusIs(StatusCode::kIoError,
                  AllOf(HasSubstr("offload_optimizer nvme step 1"), HasSubstr("read sub-group"),
                        HasSubstr(kSwapFile), HasSubstr("Input/output error"))));
  // Not the first chunk's extent: the offset of a later one in the file.
  EXPECT_GT(OffsetAfter(s.message(), kSwapFile), 0) << s.message();
}

TEST(NvmeChunksTest, FullDiskOnAChunkWriteFailsTheStepNamingFileAndItsOffset) {
  ScratchDir dir;
  FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  plan.enospc_every = 4;
  plan.only_writes = true;
  FaultRig r = MakeFaultRig(dir, plan);
  plan.armed->store(true);
  const Status s = r.nvme->Step(1, nvme_test::TestHyperparams(), 1.0f, nullptr, DType::kBFloat16);
  plan.armed->store(false);
  ASSERT_THAT(
      s, StatusIs(StatusCode::kIoError, AllOf(HasSubstr("write sub-group"), HasSubstr(kSwapFile),
                                              HasSubstr("No space left on device"))));
  EXPECT_GT(OffsetAfter(s.message(), kSwapFile), 0) << s.message();
}

}  // namespace
}  // namespace strata
