#include "tests/support/test_util.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

namespace strata::testing {
namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  const char* base = std::getenv("STRATA_TEST_DIR");
  fs::path root = base ? fs::path(base) : fs::current_path() / "test-scratch";
  static std::atomic<int> counter{0};
  path_ = root / ("t" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void FillRandom(void* p, size_t n, uint64_t seed) {
  auto* out = static_cast<uint8_t*>(p);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  while (i < n) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    size_t k = std::min<size_t>(8, n - i);
    std::memcpy(out + i, &z, k);
    i += k;
  }
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  FillRandom(v.data(), n, seed);
  return v;
}

uint64_t TestSeed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("STRATA_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    uint64_t hi = static_cast<uint64_t>(std::random_device{}()) << 32;
    uint64_t lo =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return hi ^ lo;
  }();
  static std::atomic<bool> printed{false};
  if (!printed.exchange(true)) {
    std::fprintf(stderr, "[strata] STRATA_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  }
  return seed;
}

}  // namespace strata::testing
