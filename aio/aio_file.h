// AioFile: a file opened once through an AioHandle (AioHandle::Open) - LevelDB's
// NewRandomAccessFile shape. Requests on it name no path, so a request costs no string copy and
// no locked lookup in the handle's file table; with the handle's recycled segments and pooled
// completion states it does not allocate in the steady state. The path-based AioHandle calls
// are thin wrappers that look the file up first.
//
// Copyable value. Thread safety: any method from any thread, concurrently. The AioHandle must
// outlive every AioFile opened on it. The descriptors close when the handle has forgotten the
// path (AioHandle::Close) and the last AioFile naming them is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aio/aio_future.h"
#include "aio/direct/file_table.h"
#include "core/status.h"

namespace strata {

class AioHandle;

enum class AioOpenMode {
  kRead,       // the file must exist (NotFound otherwise); writes on it are FailedPrecondition
  kReadWrite,  // created if missing
};

class AioFile {
 public:
  AioFile() = default;  // empty: valid() is false, every request fails as FailedPrecondition
  bool valid() const { return file_ != nullptr; }
  const std::string& path() const;
  bool writable() const { return writable_; }

  // Same contracts as AioHandle's path-based calls: the buffer stays valid (and, for writes,
  // unmodified) until the future is ready; errors name the file, offset, size and errno.
  AioFuture SubmitRead(void* buf, size_t size_bytes, uint64_t offset_bytes) const;
  AioFuture SubmitWrite(const void* buf, size_t size_bytes, uint64_t offset_bytes) const;
  Result<size_t> Pread(void* buf, size_t size_bytes, uint64_t offset_bytes) const;
  Result<size_t> Pwrite(const void* buf, size_t size_bytes, uint64_t offset_bytes) const;
  // fdatasync.
  Status Sync() const;

 private:
  friend class AioHandle;
  AioHandle* handle_ = nullptr;
  std::shared_ptr<OpenFile> file_;
  bool writable_ = false;
};

}  // namespace strata
