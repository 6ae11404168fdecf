// io_uring refused by the kernel, as under a container's seccomp profile (ENOSYS) or with
// kernel.io_uring_disabled = 2 (EPERM): a child process installs a seccomp filter that fails
// io_uring_setup with that errno, then checks that the io_uring engine is Unavailable with a
// hint, that `auto` falls back to libaio, and that an AioHandle on `auto` still moves data.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "aio/aio_handle.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kAuditArch = 0;
#endif

// Makes io_uring_setup fail with `err` in this process from now on.
bool RefuseIoUring(int err) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | (static_cast<uint32_t>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// Runs in the child: 0 when everything holds, else prints what did not and returns 1.
int CheckRefusal(int err) {
  int bad = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "FAILED: %s\n", what.c_str());
      bad = 1;
    }
  };
  if (!RefuseIoUring(err)) {
    std::fprintf(stderr, "FAILED: cannot install the seccomp filter: %s\n", std::strerror(errno));
    return 1;
  }
  auto uring = CreateIoEngine(IoEngineKind::kIoUring, IoEngineOptions{});
  check(!uring.ok() && uring.status().code() == StatusCode::kUnavailable,
        "io_uring engine is Unavailable: " + uring.status().ToString());
  check(uring.status().message().find(
            "io_uring is refused by this kernel; use --engine libaio or auto") != std::string::npos,
        "the error says what to do: " + uring.status().ToString());
  auto fallback = CreateIoEngine(IoEngineKind::kAuto, IoEngineOptions{});
  check(fallback.ok() && (*fallback)->name() == "libaio",
        "auto falls back to libaio: " + fallback.status().ToString());
  AioOptions o;
  o.engine = IoEngineKind::kIoUring;
  auto refused = AioHandle::Create(o);
  check(!refused.ok() && refused.status().code() == StatusCode::kUnavailable,
        "AioHandle on io_uring is Unavailable: " + refused.status().ToString());
  o.engine = IoEngineKind::kAuto;
  auto h = AioHandle::Create(o);
  check(h.ok(), "AioHandle on auto: " + h.status().ToString());
  if (h.ok()) {
    ::strata::testing::ScratchDir dir;
    auto data = ::strata::testing::RandomBytes((1 << 20) + 5, 7);
    std::vector<uint8_t> back(data.size());
    const std::string path = dir.File("refused.bin");
    check((*h)->Pwrite(path, data.data(), data.size(), 0).ok() &&
              (*h)->Pread(path, back.data(), back.size(), 0).ok() && back == data,
          "libaio round trip under auto");
  }
  return bad;
}

class IoUringRefusalTest : public ::testing::TestWithParam<int> {};

TEST_P(IoUringRefusalTest, IoUringIsUnavailableWithAHintAndAutoFallsBackToLibaio) {
  if (kAuditArch == 0) GTEST_SKIP() << "no seccomp architecture constant for this CPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(CheckRefusal(GetParam())), ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Errnos, IoUringRefusalTest, ::testing::Values(ENOSYS, EPERM),
                         [](const auto& info) {
                           return std::string(info.param == ENOSYS ? "ENOSYS" : "EPERM");
                         });

}  // namespace
}  // namespace strata
