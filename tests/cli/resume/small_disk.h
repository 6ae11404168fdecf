// A small filesystem for the disk-full tests: a tmpfs the test mounts (mount(2) needs
// CAP_SYS_ADMIN) or a directory small_disk_preload.so makes behave as one.
#pragma once

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::testing {

// A small filesystem at a directory: a tmpfs of that size (mount(2), CAP_SYS_ADMIN), or, by
// fault injection, a directory that small_disk_preload.so makes behave as one in the strata
// processes started with env(). Resize is "freeing space": the filesystem grows, its files stay.
class SmallDisk {
 public:
  SmallDisk(bool tmpfs, const std::string& dir, uint64_t bytes) : tmpfs_(tmpfs), dir_(dir) {
    std::filesystem::create_directories(dir);
    dir_ = std::filesystem::canonical(dir).string();
    if (!tmpfs) {
      bytes_ = bytes;
      ready_ = true;
    } else if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, Size(bytes).c_str()) == 0) {
      ready_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallDisk() {
    if (tmpfs_ && ready_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ready() const { return ready_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  bool Resize(uint64_t bytes) {
    if (!tmpfs_) {
      bytes_ = bytes;
      return true;
    }
    return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, Size(bytes).c_str()) == 0;
  }
  std::vector<std::string> env() const {
    if (tmpfs_) return {};
    // Under ASan the preloaded library comes before the sanitizer's runtime, which it refuses
    // unless told the order is intended (its interceptors still run: the library calls on).
    const char* asan = std::getenv("ASAN_OPTIONS");
    std::string asan_options = asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "";
    asan_options += "verify_asan_link_order=0";
    return {std::string("LD_PRELOAD=") + SMALL_DISK_PRELOAD, "STRATA_TEST_SMALL_DISK=" + dir_,
            "STRATA_TEST_SMALL_DISK_BYTES=" + std::to_string(bytes_),
            "ASAN_OPTIONS=" + asan_options};
  }

 private:
  static std::string Size(uint64_t bytes) { return "size=" + std::to_string(bytes); }
  bool tmpfs_;
  std::string dir_;
  uint64_t bytes_ = 0;
  bool ready_ = false;
  std::string error_;
};

constexpr uint64_t kMiB = 1 << 20;

// The test parameter's name: which kind of small disk (true: a tmpfs).
inline std::string SmallDiskKind(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "tmpfs" : "fault_injected";
}

}  // namespace strata::testing

// Skips a tmpfs variant where mount(2) is not allowed; the fault-injected one still runs.
#define READY_OR_SKIP(disk)                                                            \
  if (!(disk).ready()) {                                                               \
    GTEST_SKIP() << "cannot mount a tmpfs here (" << (disk).error()                    \
                 << "): needs CAP_SYS_ADMIN; the fault_injected variant runs instead"; \
  }
