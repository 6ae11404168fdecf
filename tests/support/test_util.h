// Shared test helpers: a scratch directory on the real disk, seeded random data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::testing {

// A fresh directory under $STRATA_TEST_DIR (default: <build dir>/test-scratch, i.e. the same
// ext4 disk as the work tree, so O_DIRECT works), removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Fills `n` bytes at `p` with pseudo-random bytes from `seed` (splitmix64).
void FillRandom(void* p, size_t n, uint64_t seed);
std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed);
// Seed for a test: STRATA_TEST_SEED if set, else a fresh one; printed so failures reproduce.
uint64_t TestSeed();

}  // namespace strata::testing
