// MemoryLedger (CudaDevice's allocator bookkeeping, tested without a GPU): the cap holds under
// many concurrent allocators, failures roll back, and a pointer can be freed only once.
#include "offload/device/api/memory_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using internal::MemoryLedger;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

// A distinct fake address per (thread, slot); the ledger never dereferences it.
void* FakePtr(int thread, int slot) {
  return reinterpret_cast<void*>(uintptr_t{0x10000} * (thread + 1) + uintptr_t{256} * slot);
}

TEST(MemoryLedgerTest, ConcurrentAllocatorsNearCapacityNeverOverCommit) {
  constexpr uint64_t kCapacity = 1 << 20;
  constexpr int kThreads = 16, kIters = 3000, kSlots = 4;
  MemoryLedger ledger(kCapacity, "test device");
  // The bytes the ledger granted and not yet released, counted by the test itself.
  std::atomic<uint64_t> granted{0}, max_granted{0};
  std::atomic<uint64_t> commits{0}, frees{0}, ooms{0};
  std::atomic<bool> bad_stats{false};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      // Each thread asks for up to a quarter of the capacity: 16 of them oversubscribe it 4x.
      std::uniform_int_distribution<uint64_t> size(1, kCapacity / 4);
      std::vector<std::pair<void*, uint64_t>> held;
      start.arrive_and_wait();
      for (int i = 0; i < kIters; ++i) {
        if (held.size() < kSlots && rng() % 2 == 0) {
          const uint64_t n = size(rng);
          if (!ledger.Reserve(n).ok()) {
            ooms.fetch_add(1);
            continue;
          }
          // The backend allocates here without a lock (cudaMallocAsync + sync): let others run.
          std::this_thread::yield();
          const uint64_t now = granted.fetch_add(n) + n;
          uint64_t seen = max_granted.load();
          while (now > seen && !max_granted.compare_exchange_weak(seen, now)) {
          }
          if (rng() % 8 == 0) {  // the backend's allocation failed: roll back
            granted.fetch_sub(n);
            ledger.Rollback(n, /*out_of_memory=*/true);
            ooms.fetch_add(1);
            continue;
          }
          // held[k] always has slot k (pushed and popped at the back): addresses stay distinct.
          void* p = FakePtr(t, static_cast<int>(held.size()));
          ledger.Commit(p, n);
          commits.fetch_add(1);
          held.emplace_back(p, n);
        } else if (!held.empty()) {
          auto [p, n] = held.back();
          held.pop_back();
          Result<uint64_t> taken = ledger.Take(p, "Free");
          if (!taken.ok() || *taken != n) bad_stats = true;
          granted.fetch_sub(n);
          ledger.Released(n);
          frees.fetch_add(1);
        }
        const DeviceMemoryStats s = ledger.Stats();
        if (s.in_use_bytes > kCapacity || s.largest_free_block_bytes > kCapacity) {
          bad_stats = true;  // over-commit, or capacity - in_use wrapped around
        }
      }
      for (auto& [p, n] : held) {
        if (!ledger.Take(p, "Free").ok()) bad_stats = true;
        granted.fetch_sub(n);
        ledger.Released(n);
        frees.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(bad_stats.load());
  EXPECT_LE(max_granted.load(), kCapacity);
  const DeviceMemoryStats s = ledger.Stats();
  EXPECT_EQ(0u, s.in_use_bytes);
  EXPECT_EQ(kCapacity, s.largest_free_block_bytes);
  EXPECT_LE(s.peak_bytes, kCapacity);
  EXPECT_EQ(commits.load(), s.alloc_count);
  EXPECT_EQ(frees.load(), s.free_count);
  EXPECT_EQ(ooms.load(), s.oom_count);
  EXPECT_GT(s.oom_count, 0u);  // the capacity really was contended
  EXPECT_GT(s.alloc_count, 0u);
}

TEST(MemoryLedgerTest, RefusesWhatDoesNotFitNamingTheTierAndSizes) {
  MemoryLedger ledger(1 << 20, "cuda:0 (test)");
  ASSERT_THAT(ledger.Reserve(768 << 10), IsOk());
  ledger.Commit(FakePtr(0, 0), 768 << 10);
  EXPECT_THAT(ledger.Reserve(512 << 10),
              StatusIs(StatusCode::kOutOfMemory,
                       AllOf(HasSubstr("out of memory on tier device"), HasSubstr("asked 512 KiB"),
                             HasSubstr("free 256 KiB of 1 MiB"), HasSubstr("cuda:0 (test)"))));
  const DeviceMemoryStats s = ledger.Stats();
  EXPECT_EQ(uint64_t{768} << 10, s.in_use_bytes);  // nothing counted for the refused request
  EXPECT_EQ(1u, s.oom_count);
}

TEST(MemoryLedgerTest, RollbackReturnsTheReservation) {
  MemoryLedger ledger(4096, "dev");
  ASSERT_THAT(ledger.Reserve(4096), IsOk());
  EXPECT_THAT(ledger.Reserve(1), StatusIs(StatusCode::kOutOfMemory, HasSubstr("asked 1 B")));
  ledger.Rollback(4096, /*out_of_memory=*/true);
  const DeviceMemoryStats s = ledger.Stats();
  EXPECT_EQ(0u, s.in_use_bytes);
  EXPECT_EQ(0u, s.alloc_count);
  EXPECT_EQ(2u, s.oom_count);
  EXPECT_THAT(ledger.Reserve(4096), IsOk());
}

TEST(MemoryLedgerTest, FreesEachAllocationOnce) {
  MemoryLedger ledger(4096, "dev");
  void* p = FakePtr(0, 0);
  ASSERT_THAT(ledger.Reserve(1024), IsOk());
  ledger.Commit(p, 1024);
  Result<uint64_t> n = ledger.Take(p, "Free");
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(1024u, *n);
  EXPECT_THAT(ledger.Take(p, "Free"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("Free"), HasSubstr("not a live device allocation"))));
  ledger.Restore(p, 1024);  // the backend refused the free: the allocation is live again
  ASSERT_THAT(ledger.Take(p, "FreeAsync"), IsOk());
  ledger.Released(1024);
  EXPECT_THAT(ledger.Take(FakePtr(1, 1), "FreeAsync"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("FreeAsync")));
  const DeviceMemoryStats s = ledger.Stats();
  EXPECT_EQ(0u, s.in_use_bytes);
  EXPECT_EQ(1u, s.free_count);
  EXPECT_EQ(1024u, s.peak_bytes);
}

}  // namespace
}  // namespace strata
