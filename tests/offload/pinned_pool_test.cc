// PinnedPool: reuse without allocation, alignment, locking and its fallback, NUMA binding,
// budget charging, blocking acquisition across threads.
#include "offload/pinned_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "offload/device/registry.h"
#include "offload/numa.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<PinnedPool> MakePool(PinnedPoolOptions o) {
  auto pool = PinnedPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? std::move(pool).value() : nullptr;
}

TEST(PinnedPoolTest, ReusesTheSameBuffersAcrossSteps) {
  PinnedPoolOptions o;
  o.buffer_bytes = 100000;  // rounded up to 4 KiB multiples
  o.buffer_count = 3;
  auto pool = MakePool(o);
  ASSERT_NE(nullptr, pool);
  EXPECT_EQ(102400u, pool->buffer_bytes());
  std::set<void*> first_step;
  for (int step = 0; step < 50; ++step) {
    std::vector<PinnedBuffer> leased;
    for (int i = 0; i < 3; ++i) leased.push_back(pool->Acquire());
    for (auto& b : leased) {
      EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(b.data()) % 4096);  // O_DIRECT-ready
      std::memset(b.data(), step, b.size());
      if (step == 0) first_step.insert(b.data());
      EXPECT_TRUE(first_step.count(b.data())) << "a buffer that is not one of the pool's";
    }
    EXPECT_THAT(pool->TryAcquire(), StatusIs(StatusCode::kUnavailable,
                                             HasSubstr("pinned pool: all 3 buffers are in use")));
  }
  EXPECT_EQ(3u, first_step.size());
  EXPECT_EQ(3u, pool->free_count());
  const PinnedPoolStats s = pool->Stats();
  EXPECT_EQ(150u, s.acquire_count);
  EXPECT_EQ(3u, s.peak_in_use);
  EXPECT_EQ(0u, s.in_use);
}

TEST(PinnedPoolTest, LargeBuffersStartOnHugePages) {
  PinnedPoolOptions o;
  o.buffer_bytes = 3 * kMiB;
  o.buffer_count = 2;
  auto pool = MakePool(o);
  ASSERT_NE(nullptr, pool);
  EXPECT_EQ(4 * kMiB, pool->buffer_bytes());
  auto a = pool->Acquire();
  auto b = pool->Acquire();
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(a.data()) % (2 * kMiB));
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(b.data()) % (2 * kMiB));
}

TEST(PinnedPoolTest, LocksAndBindsToTheLocalNumaNode) {
  auto topo = HostTopology::Get();
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_GE((*topo)->numa_node_count(), 1);
  PinnedPoolOptions o;
  o.buffer_bytes = kMiB;
  o.buffer_count = 2;
  auto pool = MakePool(o);
  ASSERT_NE(nullptr, pool);
  EXPECT_EQ((*topo)->CurrentNumaNode(), pool->numa_node());
  // As root (CAP_IPC_LOCK) mlock works; otherwise the fallback is the documented behaviour.
  if (!pool->locked()) GTEST_SKIP() << "mlock refused here: " << pool->Describe();
  EXPECT_EQ(PinnedPool::LockMode::kMlocked, pool->lock_mode());
  EXPECT_NE(std::string::npos, pool->Describe().find("mlocked")) << pool->Describe();
}

TEST(PinnedPoolTest, ChargesTheCpuTierAndFailsOverBudget) {
  TierBudget budget({TierBudget::kUnlimited, 3 * kMiB, TierBudget::kUnlimited});
  PinnedPoolOptions o;
  o.buffer_bytes = kMiB;
  o.buffer_count = 2;
  o.budget = &budget;
  o.name = "param swap buffers";
  {
    auto pool = MakePool(o);
    ASSERT_NE(nullptr, pool);
    EXPECT_EQ(2 * kMiB, budget.Stats(Tier::kCpu).current_bytes);
    EXPECT_THAT(PinnedPool::Create(o),
                StatusIs(StatusCode::kOutOfMemory, AllOf(HasSubstr("out of memory on tier cpu"),
                                                         HasSubstr("param swap buffers"))));
  }
  EXPECT_EQ(0u, budget.Stats(Tier::kCpu).current_bytes);
}

TEST(PinnedPoolTest, HostDeviceNeedsNoRegistrationSoThePoolMlocks) {
  auto device = CreateHostDevice(HostDeviceOptions{.memory_bytes = kMiB});
  ASSERT_TRUE(device.ok());
  PinnedPoolOptions o;
  o.buffer_count = 1;
  o.device = device->get();
  auto pool = MakePool(o);
  ASSERT_NE(nullptr, pool);
  EXPECT_NE(PinnedPool::LockMode::kDeviceRegistered, pool->lock_mode());
}

TEST(PinnedPoolTest, BlockedAcquireWakesWhenAnotherThreadReleases) {
  PinnedPoolOptions o;
  o.buffer_bytes = 4096;
  o.buffer_count = 2;
  o.lock = false;
  auto pool = MakePool(o);
  ASSERT_NE(nullptr, pool);
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        PinnedBuffer b = pool->Acquire();
        b.bytes()[0] = static_cast<uint8_t>(i);
        total.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(2000, total.load());
  EXPECT_EQ(2u, pool->free_count());
  EXPECT_LE(pool->Stats().peak_in_use, 2u);
  auto a = pool->Acquire();
  auto b = pool->Acquire();
  EXPECT_THAT(pool->AcquireFor(std::chrono::milliseconds(1)),
              StatusIs(StatusCode::kUnavailable,
                       HasSubstr("pinned pool: no buffer freed within 1 ms (all 2 in use)")));
}

// Drops CAP_IPC_LOCK and lowers RLIMIT_MEMLOCK in a child process, so mlock hits the limit.
bool DropLockPrivilege() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  data[0].effective &= ~(1u << CAP_IPC_LOCK);
  if (syscall(SYS_capset, &hdr, data) != 0) return false;
  rlimit lim{64 << 10, 64 << 10};
  return setrlimit(RLIMIT_MEMLOCK, &lim) == 0;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerInterceptsMlock = true;
#else
constexpr bool kSanitizerInterceptsMlock = false;
#endif

TEST(PinnedPoolDeathTest, FallsBackToPageableWithOneLineWhenTheLockLimitIsHit) {
  if (kSanitizerInterceptsMlock) {
    GTEST_SKIP() << "sanitizer runtimes replace mlock with a no-op that succeeds: the lock "
                    "limit cannot be hit in this build";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!DropLockPrivilege()) std::_Exit(3);
        PinnedPoolOptions o;
        o.buffer_bytes = 4 * kMiB;
        o.buffer_count = 2;
        auto pool = PinnedPool::Create(o);
        auto again = PinnedPool::Create(o);  // second failure: no second line
        if (!pool.ok() || !again.ok()) {
          std::fprintf(stderr, "create failed: %s\n",
                       (pool.ok() ? again.status() : pool.status()).ToString().c_str());
          std::_Exit(2);
        }
        const bool ok = !(*pool)->locked() && !(*again)->locked();
        if (ok) {
          PinnedBuffer b = (*pool)->Acquire();
          std::memset(b.data(), 1, b.size());  // still usable
        }
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "^strata: warning: pinned pool: mlock of 8 MiB failed \\([^)]*; raise 'ulimit -l' or grant "
      "CAP_IPC_LOCK\\): falling back to pageable memory\n$");
}

}  // namespace
}  // namespace strata
