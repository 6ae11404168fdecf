// IoEngine: the one small interface between Strata and the kernel's async I/O.
//
// An engine is a submission/completion queue of bounded depth: Submit() hands requests to the
// kernel, Reap() collects completions. Backends (io_uring via liburing, libaio) are `final`
// classes made by CreateIoEngine(); IoEngineWrapper forwards everything and is the base of test
// doubles such as the fault-injecting engine.
//
// Thread safety: an engine is used by one thread at a time (each AioHandle worker owns one).
// Ownership: buffers named by requests are owned by the caller and must stay valid until their
// completion has been reaped.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace strata {

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  // Identifies the open file for fixed-file registration; unique per open (never reused, unlike
  // fd numbers). 0 = do not register.
  uint64_t file_id = 0;
  void* buf = nullptr;
  uint32_t size_bytes = 0;
  uint64_t offset_bytes = 0;
  uint64_t user_data = 0;
};

struct IoCompletion {
  uint64_t user_data = 0;
  // Bytes transferred (may be short), or -errno.
  int64_t result = 0;
};

enum class IoEngineKind { kAuto, kIoUring, kLibaio };
std::string_view IoEngineKindName(IoEngineKind kind);
// "io_uring" | "libaio" | "auto"; InvalidArgument otherwise.
Result<IoEngineKind> ParseIoEngineKind(std::string_view name);

struct IoEngineOptions {
  int queue_depth = 8;
  // io_uring only: register files (IOSQE_FIXED_FILE) and honour RegisterBuffer (READ_FIXED).
  bool fixed_files = true;
  bool registered_buffers = true;
  // io_uring only: kernel submission-queue polling thread. Costs a whole core: opt-in.
  bool sqpoll = false;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // "io_uring" or "libaio" (wrappers report the wrapped name).
  virtual std::string_view name() const = 0;
  virtual int queue_depth() const = 0;

  // Hands `requests` to the kernel. The caller keeps at most queue_depth() requests in flight.
  // On error nothing of `requests` is in flight unless stated by the returned count: the result
  // is the number accepted (all of them on success).
  virtual Result<int> Submit(std::span<const IoRequest> requests) = 0;

  // Waits until at least `min_complete` completions are available (0: do not wait) or
  // `timeout_us` passes (< 0: no timeout), then moves up to out.size() of them into `out`.
  // Returns how many were written. EINTR is retried inside.
  virtual Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) = 0;

  // Optional: make [p, p+size) a registered buffer so requests inside it skip per-I/O page
  // pinning. Unimplemented when the backend cannot. The range must stay mapped until
  // UnregisterBuffer(p) returns.
  virtual Status RegisterBuffer(void* p, size_t size_bytes) {
    (void)p, (void)size_bytes;
    return UnimplementedError(std::string(name()) + " has no registered buffers");
  }
  virtual Status UnregisterBuffer(void* p) {
    (void)p;
    return UnimplementedError(std::string(name()) + " has no registered buffers");
  }
  // Forgets any fixed-file slot held for `file_id`.
  virtual void ForgetFile(uint64_t file_id) { (void)file_id; }
  // Human-readable feature list, e.g. "io_uring (fixed files, registered buffers)".
  virtual std::string Describe() const { return std::string(name()); }
};

// Makes an engine. kAuto picks io_uring when the kernel allows it, else libaio, and logs one
// line saying so when it falls back.
Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoEngineKind kind, const IoEngineOptions& options);

// Forwards every call to a wrapped engine; override what a test double changes.
class IoEngineWrapper : public IoEngine {
 public:
  explicit IoEngineWrapper(std::unique_ptr<IoEngine> target) : target_(std::move(target)) {}
  std::string_view name() const override { return target_->name(); }
  int queue_depth() const override { return target_->queue_depth(); }
  Result<int> Submit(std::span<const IoRequest> r) override { return target_->Submit(r); }
  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override {
    return target_->Reap(out, min_complete, timeout_us);
  }
  Status RegisterBuffer(void* p, size_t n) override { return target_->RegisterBuffer(p, n); }
  Status UnregisterBuffer(void* p) override { return target_->UnregisterBuffer(p); }
  void ForgetFile(uint64_t id) override { target_->ForgetFile(id); }
  std::string Describe() const override { return target_->Describe(); }

 protected:
  IoEngine& target() { return *target_; }

 private:
  std::unique_ptr<IoEngine> target_;
};

}  // namespace strata
