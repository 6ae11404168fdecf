#include "aio/aio_file.h"

#include <unistd.h>

#include <cerrno>

#include "aio/aio_handle.h"
#include "aio/aio_request.h"

namespace strata {

bool AioFuture::ready() const { return state_ == nullptr || state_->ready(); }

Result<size_t> AioFuture::Wait() const {
  if (state_ == nullptr) return FailedPreconditionError("wait on an empty AioFuture");
  return state_->Wait();
}

const std::string& AioFile::path() const {
  static const std::string kNone = "(no file)";
  return file_ != nullptr ? file_->path : kNone;
}

AioFuture AioFile::SubmitRead(void* buf, size_t size_bytes, uint64_t offset_bytes) const {
  if (!valid()) return AioHandle::FailedFuture(FailedPreconditionError("read on an empty AioFile"));
  return handle_->SubmitOne(IoOp::kRead, file_, buf, size_bytes, offset_bytes);
}

AioFuture AioFile::SubmitWrite(const void* buf, size_t size_bytes, uint64_t offset_bytes) const {
  if (!valid()) {
    return AioHandle::FailedFuture(FailedPreconditionError("write on an empty AioFile"));
  }
  if (!writable_) {
    return AioHandle::FailedFuture(
        FailedPreconditionError("write " + file_->path + " @ " + std::to_string(offset_bytes) +
                                ": the file was opened for reading (AioOpenMode::kRead)"));
  }
  return handle_->SubmitOne(IoOp::kWrite, file_, const_cast<void*>(buf), size_bytes, offset_bytes);
}

Result<size_t> AioFile::Pread(void* buf, size_t size_bytes, uint64_t offset_bytes) const {
  return SubmitRead(buf, size_bytes, offset_bytes).Wait();
}

Result<size_t> AioFile::Pwrite(const void* buf, size_t size_bytes, uint64_t offset_bytes) const {
  return SubmitWrite(buf, size_bytes, offset_bytes).Wait();
}

Status AioFile::Sync() const {
  if (!valid()) return FailedPreconditionError("sync of an empty AioFile");
  const int fd = file_->direct_fd >= 0 ? file_->direct_fd : file_->buffered_fd;
  if (::fdatasync(fd) != 0) return ErrnoToStatus(errno, "fdatasync " + file_->path);
  return Status::Ok();
}

}  // namespace strata
