// AioHandle: Strata's async file I/O front door - DeepSpeed's aio handle, done right.
//
// A request (pread/pwrite of a buffer at a file offset) is cut into `block_size` pieces; each of
// `thread_count` threads owns one slice of it (any size) and keeps up to `queue_depth` pieces in
// flight on its own io_uring or libaio queue. Files are opened once and cached; Open() returns
// an AioFile whose requests skip the path lookup (the hot path, aio_file.h). O_DIRECT is used
// for the aligned middle of every request; unaligned heads/tails go through the page cache and
// unaligned buffers through a bounce buffer, so any size, offset and buffer works. Every
// completion is checked; short transfers are resumed; errors name file, offset, size and errno.
//
// Thread safety: every method may be called from any thread concurrently. A buffer must stay
// valid, and (for writes) unmodified, until the request's future is ready.
//
// Ordering: requests in flight are not ordered. A thread issues the pieces of queued reads before
// those of queued writes (a write waits for at most queue_depth read pieces in a row: Note [Reads
// first] in aio_worker.cc), and pieces complete in any order, so a read of bytes being written
// must wait for the write's future first.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aio/aio_file.h"
#include "aio/aio_future.h"
#include "aio/aio_options.h"
#include "aio/direct/file_table.h"
#include "aio/engine/io_engine.h"
#include "core/status.h"

namespace strata {

namespace internal {
class AioWorker;
class RequestState;
}  // namespace internal

struct AioRequest {
  IoOp op = IoOp::kRead;
  std::string path;  // ignored when `file` is set
  void* buf = nullptr;
  size_t size_bytes = 0;
  uint64_t offset_bytes = 0;
  const AioFile* file = nullptr;  // an opened file of this handle (no path lookup)
};

class AioHandle;

// A buffer registered with every worker's engine (io_uring READ_FIXED/WRITE_FIXED). Unregisters
// on destruction; no I/O on the buffer may be in flight then, and both the buffer and the
// AioHandle must outlive it.
class RegisteredBuffer {
 public:
  RegisteredBuffer() = default;
  ~RegisteredBuffer();
  RegisteredBuffer(RegisteredBuffer&& o) noexcept;
  RegisteredBuffer& operator=(RegisteredBuffer&& o) noexcept;
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;

 private:
  friend class AioHandle;
  AioHandle* handle_ = nullptr;
  void* data_ = nullptr;
};

class AioHandle {
 public:
  // Validates options (block_size a multiple of 4096 in [4 KiB, 1 GiB], queue_depth in [1, 1024],
  // thread_count in [1, 64]) and starts the threads, one engine each.
  static Result<std::unique_ptr<AioHandle>> Create(const AioOptions& options);
  ~AioHandle();  // completes queued requests, then stops the threads

  // Opens (or finds in the cache) `path` once; requests through the AioFile skip the lookup.
  // Errors: NotFound (kRead of a missing file), the errno of open(2), InvalidArgument when the
  // filesystem refuses O_DIRECT and buffered I/O is not allowed - each naming the path.
  Result<AioFile> Open(const std::string& path, AioOpenMode mode);

  // Path-based forms (thin wrappers: the file is looked up, opened on first use, per request).
  // Synchronous forms: the byte count or the first error.
  Result<size_t> Pread(const std::string& path, void* buf, size_t size_bytes,
                       uint64_t offset_bytes);
  Result<size_t> Pwrite(const std::string& path, const void* buf, size_t size_bytes,
                        uint64_t offset_bytes);

  AioFuture SubmitRead(const std::string& path, void* buf, size_t size_bytes,
                       uint64_t offset_bytes);
  AioFuture SubmitWrite(const std::string& path, const void* buf, size_t size_bytes,
                        uint64_t offset_bytes);
  // Many tensors at once; one future for all (sum of bytes, first error).
  AioFuture SubmitBatch(std::span<const AioRequest> requests);

  // Registers [p, p+size) with every worker's engine. Unavailable when the engine cannot
  // (libaio, or registration turned off); I/O works either way.
  Result<RegisteredBuffer> RegisterBuffer(void* p, size_t size_bytes);

  // Closes a cached file. No I/O on it may be in flight.
  Status Close(const std::string& path);
  // fdatasync of a file this handle has open (checkpoints need it).
  Status Sync(const std::string& path);

  // Piece latencies (ns) since the last call, all threads (options.record_latency only).
  std::vector<int64_t> TakeLatencies();
  // The most read pieces one thread had in flight at once since the last call (at most
  // queue_depth): whether readers kept the queue full. Waits for each thread to be between I/Os.
  int TakeMaxReadsInFlight();

  const AioOptions& options() const { return options_; }
  // "io_uring (fixed files, registered buffers), block 1 MiB, qd 8, 1 thread, overlap".
  std::string Describe() const;

 private:
  friend class RegisteredBuffer;
  friend class AioFile;
  explicit AioHandle(const AioOptions& options);
  AioFuture Submit(std::span<const AioRequest> requests);
  // One request on an open file: no lookup, no allocation in the steady state.
  AioFuture SubmitOne(IoOp op, const std::shared_ptr<OpenFile>& file, void* buf, size_t size_bytes,
                      uint64_t offset_bytes);
  static AioFuture FailedFuture(Status error);
  // How many segments a request becomes (or why it cannot be done); Enqueue then makes them.
  Result<int> CountSegments(IoOp op, const OpenFile& file, const void* buf, uint64_t offset_bytes,
                            uint64_t size_bytes) const;
  void Enqueue(IoOp op, const std::shared_ptr<OpenFile>& file, uint8_t* base, uint64_t offset_bytes,
               uint64_t size_bytes, const std::shared_ptr<internal::RequestState>& state);
  void UnregisterBuffer(void* p);

  AioOptions options_;
  FileTable files_;
  std::vector<std::unique_ptr<internal::AioWorker>> workers_;
};

}  // namespace strata
