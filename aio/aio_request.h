// Private to aio/: the shared completion state of one AioHandle request and the segments a
// request is cut into (one per worker thread, plus buffered heads/tails).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "aio/direct/file_table.h"
#include "aio/engine/io_engine.h"
#include "core/status.h"

namespace strata::internal {

// Completes when every segment has reported. The first error wins; bytes add up.
class RequestState {
 public:
  explicit RequestState(int segments) : remaining_(segments) {}

  void SegmentDone(const Status& status, uint64_t bytes) {
    std::lock_guard lock(mu_);
    if (!status.ok() && status_.ok()) status_ = status;
    bytes_ += bytes;
    if (--remaining_ == 0) cv_.notify_all();
  }
  bool ready() const {
    std::lock_guard lock(mu_);
    return remaining_ == 0;
  }
  Result<size_t> Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return remaining_ == 0; });
    if (!status_.ok()) return status_;
    return static_cast<size_t>(bytes_);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int remaining_;
  Status status_;
  uint64_t bytes_ = 0;
};

// A completion state for `segments` segments, from a process-wide pool of recycled blocks (one
// heap allocation per request otherwise).
std::shared_ptr<RequestState> MakeRequestState(int segments);

// A contiguous byte range of a request, handled by one worker.
struct Segment {
  std::shared_ptr<RequestState> request;
  std::shared_ptr<OpenFile> file;
  IoOp op = IoOp::kRead;
  uint8_t* buf = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;
  // Done with pread/pwrite on the buffered descriptor (unaligned head/tail, tiny request).
  bool buffered = false;
  // Descriptor for engine I/O: direct_fd, or buffered_fd when the file has no O_DIRECT.
  int fd = -1;

  // Worker-side progress.
  uint64_t issued = 0;
  uint64_t completed = 0;
  int inflight = 0;
  Status status;
};

}  // namespace strata::internal
