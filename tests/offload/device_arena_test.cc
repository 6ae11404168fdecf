// HostDevice's device-memory arena: out-of-memory text, best fit, coalescing, accounting.
#include "offload/device/host/device_arena.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using internal::DeviceArena;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

std::unique_ptr<DeviceArena> MakeArena(size_t bytes) {
  DeviceArena::Options o;
  o.capacity_bytes = bytes;
  auto arena = DeviceArena::Create(o);
  EXPECT_TRUE(arena.ok()) << arena.status().ToString();
  return std::move(arena).value();
}

TEST(DeviceArenaTest, OutOfMemoryNamesTierAskedFreeAndLargestBlock) {
  HostDeviceOptions o;
  o.memory_bytes = size_t{1} << 20;
  auto device = CreateHostDevice(o);
  ASSERT_TRUE(device.ok());
  auto first = (*device)->Allocate(600 << 10);
  ASSERT_TRUE(first.ok());
  auto second = (*device)->Allocate(600 << 10);
  ASSERT_FALSE(second.ok());
  const Status& s = second.status();
  EXPECT_EQ(StatusCode::kOutOfMemory, s.code());
  EXPECT_EQ(
      "OutOfMemory: out of memory on tier device: asked 600 KiB (614400 B), free 424 KiB of "
      "1 MiB, largest free block 424 KiB",
      s.ToString());
  EXPECT_EQ(1u, (*device)->MemoryStats().oom_count);
  EXPECT_TRUE((*device)->Free(*first).ok());
}

TEST(DeviceArenaTest, SaysFragmentedWhenFreeBytesSufficeButNoBlockDoes) {
  auto arena = MakeArena(size_t{1} << 20);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*arena->Allocate(128 << 10));
  EXPECT_THAT(
      arena->Allocate(1),
      StatusIs(StatusCode::kOutOfMemory, AllOf(HasSubstr("out of memory on tier device: asked 1 B"),
                                               HasSubstr("free 0 B of 1 MiB"))));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(arena->Free(blocks[i]).ok());
  EXPECT_THAT(arena->Allocate(256 << 10),
              StatusIs(StatusCode::kOutOfMemory,
                       AllOf(HasSubstr("asked 256 KiB"), HasSubstr("free 512 KiB of 1 MiB"),
                             HasSubstr("largest free block 128 KiB (fragmented)"))));
  EXPECT_EQ(4u, arena->free_block_count());
  // Freeing the odd blocks coalesces everything back into one block.
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(arena->Free(blocks[i]).ok());
  EXPECT_EQ(1u, arena->free_block_count());
  auto whole = arena->Allocate(size_t{1} << 20);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(blocks[0], *whole);
}

TEST(DeviceArenaTest, BestFitPicksTheSmallestBlockThatFits) {
  auto arena = MakeArena(size_t{1} << 20);
  void* a = *arena->Allocate(256 << 10);
  void* sep1 = *arena->Allocate(4096);
  void* b = *arena->Allocate(64 << 10);
  void* sep2 = *arena->Allocate(4096);
  ASSERT_TRUE(arena->Free(a).ok());
  ASSERT_TRUE(arena->Free(b).ok());
  EXPECT_EQ(b, *arena->Allocate(60 << 10));  // the 64 KiB hole, not the 256 KiB one
  (void)sep1;
  (void)sep2;
}

TEST(DeviceArenaTest, RandomAllocFreeKeepsBlocksDisjointAndCoalescesToOne) {
  constexpr size_t kCap = size_t{8} << 20;
  auto arena = MakeArena(kCap);
  std::mt19937_64 rng(testing::TestSeed());
  std::map<uintptr_t, size_t> live;  // address -> size asked
  size_t in_use = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = 1 + rng() % (64 << 10);
      auto p = arena->Allocate(n);
      if (!p.ok()) {
        ASSERT_THAT(p,
                    StatusIs(StatusCode::kOutOfMemory, HasSubstr("out of memory on tier device")));
        continue;
      }
      const auto addr = reinterpret_cast<uintptr_t>(*p);
      ASSERT_EQ(0u, addr % DeviceArena::kAlignment);
      ASSERT_TRUE(arena->Contains(*p, n));
      auto next = live.lower_bound(addr);
      if (next != live.end()) {
        ASSERT_LE(addr + n, next->first);
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, addr);
      }
      live.emplace(addr, n);
      in_use += (n + 255) / 256 * 256;
    } else {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(arena->Free(reinterpret_cast<void*>(it->first)).ok());
      in_use -= (it->second + 255) / 256 * 256;
      live.erase(it);
    }
    ASSERT_EQ(in_use, arena->Stats().in_use_bytes);
  }
  for (auto& [addr, n] : live) ASSERT_TRUE(arena->Free(reinterpret_cast<void*>(addr)).ok());
  const auto stats = arena->Stats();
  EXPECT_EQ(0u, stats.in_use_bytes);
  EXPECT_EQ(kCap, stats.largest_free_block_bytes);
  EXPECT_EQ(1u, arena->free_block_count());
  EXPECT_EQ(stats.alloc_count, stats.free_count);
  EXPECT_LE(stats.peak_bytes, kCap);
}

TEST(DeviceArenaTest, RejectsDoubleFreeAndForeignPointers) {
  auto arena = MakeArena(size_t{1} << 20);
  void* p = *arena->Allocate(100);
  ASSERT_TRUE(arena->Free(p).ok());
  EXPECT_THAT(arena->Free(p), StatusIs(StatusCode::kInvalidArgument,
                                       HasSubstr("device free: pointer is not a live device "
                                                 "allocation (double free or foreign pointer)")));
  int local = 0;
  EXPECT_THAT(arena->Free(&local),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a live device allocation")));
  EXPECT_THAT(arena->Free(nullptr), IsOk());
}

}  // namespace
}  // namespace strata
