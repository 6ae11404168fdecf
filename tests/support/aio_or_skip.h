// AioOrSkip(kind): skips the running test when the kernel refuses an aio engine (io_uring turned
// off by kernel.io_uring_disabled or a container's seccomp profile: CreateIoEngine says
// Unavailable), with the engine's own message ("io_uring is refused by this kernel; use --engine
// libaio or auto ..."). Any other failure is not a reason to skip: the test then fails on it.
//
//   STRATA_AIO_OR_SKIP(IoEngineKind::kIoUring);   // in SetUp() or a test body
#pragma once

#include <array>
#include <mutex>
#include <optional>

#include <gtest/gtest.h>

#include "aio/engine/io_engine.h"

namespace strata::testing {

// Whether an engine of `kind` can be made here (checked once per process and kind).
inline Status AioEngineStatus(IoEngineKind kind) {
  static std::mutex mu;
  static std::array<std::optional<Status>, 3> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[static_cast<size_t>(kind)];
  if (!slot) slot = CreateIoEngine(kind, IoEngineOptions{}).status();
  return *slot;
}

// Records a skip (GTEST_SKIP) when `kind` is refused by this kernel; the caller must then return
// (STRATA_AIO_OR_SKIP does).
inline void AioOrSkip(IoEngineKind kind) {
  Status s = AioEngineStatus(kind);
  if (s.code() == StatusCode::kUnavailable) GTEST_SKIP() << s.message();
}

}  // namespace strata::testing

#define STRATA_AIO_OR_SKIP(kind)              \
  do {                                        \
    ::strata::testing::AioOrSkip(kind);       \
    if (::testing::Test::IsSkipped()) return; \
  } while (0)
