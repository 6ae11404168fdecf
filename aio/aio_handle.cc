#include "aio/aio_handle.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "aio/aio_request.h"
#include "aio/aio_worker.h"
#include "core/units.h"

namespace strata {

using internal::RequestState;
using internal::Segment;

RegisteredBuffer::~RegisteredBuffer() {
  if (handle_ != nullptr) handle_->UnregisterBuffer(data_);
}
RegisteredBuffer::RegisteredBuffer(RegisteredBuffer&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), data_(std::exchange(o.data_, nullptr)) {}
RegisteredBuffer& RegisteredBuffer::operator=(RegisteredBuffer&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) handle_->UnregisterBuffer(data_);
    handle_ = std::exchange(o.handle_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

AioHandle::AioHandle(const AioOptions& options)
    : options_(options), files_(options.allow_buffered) {}

AioHandle::~AioHandle() = default;

Result<std::unique_ptr<AioHandle>> AioHandle::Create(const AioOptions& o) {
  if (o.block_size < 4096 || o.block_size % 4096 != 0 || o.block_size > (size_t{1} << 30)) {
    return InvalidArgumentError("aio block_size " + std::to_string(o.block_size) +
                                " must be a multiple of 4096 in [4096, 1 GiB]");
  }
  if (o.queue_depth < 1 || o.queue_depth > 1024) {
    return InvalidArgumentError("aio queue_depth " + std::to_string(o.queue_depth) +
                                " must be in [1, 1024]");
  }
  if (o.thread_count < 1 || o.thread_count > 64) {
    return InvalidArgumentError("aio intra_op_parallelism (thread_count) " +
                                std::to_string(o.thread_count) + " must be in [1, 64]");
  }
  std::unique_ptr<AioHandle> h(new AioHandle(o));
  IoEngineOptions eo;
  eo.queue_depth = o.queue_depth;
  eo.fixed_files = o.fixed_files;
  eo.registered_buffers = o.registered_buffers;
  eo.sqpoll = o.sqpoll;
  for (int i = 0; i < o.thread_count; ++i) {
    auto engine = o.engine_factory ? o.engine_factory(i, eo) : CreateIoEngine(o.engine, eo);
    if (!engine.ok()) return engine.status().WithContext("aio thread " + std::to_string(i));
    h->workers_.push_back(
        std::make_unique<internal::AioWorker>(i, std::move(engine).value(), AlignedBuffer(), o));
  }
  return h;
}

Result<AioFile> AioHandle::Open(const std::string& path, AioOpenMode mode) {
  const bool write = mode == AioOpenMode::kReadWrite;
  auto f = files_.Get(path, write);
  if (!f.ok()) return f.status();
  AioFile file;
  file.handle_ = this;
  file.file_ = std::move(f).value();
  file.writable_ = write;
  return file;
}

Result<size_t> AioHandle::Pread(const std::string& path, void* buf, size_t n, uint64_t off) {
  return SubmitRead(path, buf, n, off).Wait();
}

Result<size_t> AioHandle::Pwrite(const std::string& path, const void* buf, size_t n, uint64_t off) {
  return SubmitWrite(path, buf, n, off).Wait();
}

AioFuture AioHandle::SubmitRead(const std::string& path, void* buf, size_t n, uint64_t off) {
  AioRequest r{IoOp::kRead, path, buf, n, off};
  return Submit({&r, 1});
}

AioFuture AioHandle::SubmitWrite(const std::string& path, const void* buf, size_t n, uint64_t off) {
  AioRequest r{IoOp::kWrite, path, const_cast<void*>(buf), n, off};
  return Submit({&r, 1});
}

AioFuture AioHandle::SubmitBatch(std::span<const AioRequest> requests) { return Submit(requests); }

AioFuture AioHandle::FailedFuture(Status error) {
  auto state = internal::MakeRequestState(1);
  state->SegmentDone(error, 0);
  return AioFuture(std::move(state));
}

namespace {

std::string RequestName(IoOp op, const std::string& path, uint64_t offset, size_t size) {
  return std::string(op == IoOp::kRead ? "read " : "write ") + path + " @ " +
         std::to_string(offset) + " (" + FormatBytes(size) + ")";
}

// Note [Splitting a request]
// The aligned middle [a, e) of a request goes O_DIRECT, cut into one slice per thread at
// multiples of the file's split alignment (>= the page size). The unaligned head [off, a) and
// tail [e, end) are small (< one page each) and go through the page cache on the first and last
// thread; because the split points are page multiples, a buffered edge never shares a
// page-cache page with this request's direct range. Files without O_DIRECT are sliced evenly.
//
// Calls emit(from, to, buffered, fd, worker) for each segment, in a fixed order (worker -1: any
// thread, for a request too small to split). The same inputs give the same segments, so a caller
// may count them first and emit them second without storing them.
template <typename Emit>
Status Split(const OpenFile& f, uint64_t off, uint64_t size, uint64_t threads, size_t block_size,
             Emit&& emit) {
  const uint64_t end = off + size;
  if (f.direct_fd < 0) {
    for (uint64_t k = 0; k < threads; ++k) {
      uint64_t s = off + size * k / threads, e = off + size * (k + 1) / threads;
      if (e > s) emit(s, e, false, f.buffered_fd, static_cast<int>(k));
    }
    return Status::Ok();
  }
  const uint64_t A = f.split_align;
  if (block_size % A != 0) {
    return InvalidArgumentError("aio block_size " + std::to_string(block_size) +
                                " is not a multiple of the O_DIRECT alignment " +
                                std::to_string(A) + " of " + f.path);
  }
  const uint64_t a = (off + A - 1) / A * A, e = end / A * A;
  if (e <= a) {
    emit(off, end, true, f.buffered_fd, -1);
    return Status::Ok();
  }
  if (a > off) emit(off, a, true, f.buffered_fd, 0);
  if (end > e) emit(e, end, true, f.buffered_fd, static_cast<int>(threads - 1));
  const uint64_t blocks = (e - a) / A;
  for (uint64_t k = 0; k < threads; ++k) {
    uint64_t s = a + A * (blocks * k / threads), t = a + A * (blocks * (k + 1) / threads);
    if (t > s) emit(s, t, false, f.direct_fd, static_cast<int>(k));
  }
  return Status::Ok();
}

}  // namespace

// Cuts one request into segments and hands them to the workers (see Split). The request state
// is created once the segments are counted, so nothing is stored in between.
void AioHandle::Enqueue(IoOp op, const std::shared_ptr<OpenFile>& f, uint8_t* base, uint64_t off,
                        uint64_t size, const std::shared_ptr<internal::RequestState>& state) {
  static std::atomic<uint64_t> round_robin{0};
  const auto threads = static_cast<uint64_t>(workers_.size());
  Split(*f, off, size, threads, options_.block_size,
        [&](uint64_t from, uint64_t to, bool buffered, int fd, int worker) {
          if (worker < 0) worker = static_cast<int>(round_robin++ % threads);
          Segment s;
          s.request = state;
          s.file = f;
          s.op = op;
          s.buf = base + (from - off);
          s.offset = from;
          s.size = to - from;
          s.buffered = buffered;
          s.fd = fd;
          workers_[static_cast<size_t>(worker)]->Enqueue(std::move(s));
        })
      .IgnoreError();  // checked by CountSegments before
}

Result<int> AioHandle::CountSegments(IoOp op, const OpenFile& f, const void* buf, uint64_t off,
                                     uint64_t size) const {
  if (buf == nullptr) {
    return InvalidArgumentError(RequestName(op, f.path, off, size) + ": null buffer");
  }
  int n = 0;
  Status s = Split(f, off, size, workers_.size(), options_.block_size,
                   [&](uint64_t, uint64_t, bool, int, int) { ++n; });
  if (!s.ok()) return s;
  return n;
}

AioFuture AioHandle::SubmitOne(IoOp op, const std::shared_ptr<OpenFile>& f, void* buf, size_t n,
                               uint64_t off) {
  if (n == 0) return AioFuture(internal::MakeRequestState(0));
  auto count = CountSegments(op, *f, buf, off, n);
  if (!count.ok()) return FailedFuture(count.status());
  auto state = internal::MakeRequestState(*count);
  Enqueue(op, f, static_cast<uint8_t*>(buf), off, n, state);
  return AioFuture(std::move(state));
}

AioFuture AioHandle::Submit(std::span<const AioRequest> requests) {
  // Resolve and check everything first: a bad request starts nothing.
  std::vector<std::shared_ptr<OpenFile>> files(requests.size());
  int segments = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const AioRequest& r = requests[i];
    if (r.size_bytes == 0) continue;
    const bool write = r.op == IoOp::kWrite;
    if (r.file != nullptr) {
      if (!r.file->valid() || r.file->handle_ != this) {
        return FailedFuture(FailedPreconditionError(
            RequestName(r.op, r.file->path(), r.offset_bytes, r.size_bytes) +
            ": the AioFile is empty or was opened on another AioHandle"));
      }
      if (write && !r.file->writable()) {
        return FailedFuture(FailedPreconditionError(
            RequestName(r.op, r.file->path(), r.offset_bytes, r.size_bytes) +
            ": the file was opened for reading (AioOpenMode::kRead)"));
      }
      files[i] = r.file->file_;
    } else {
      auto f = files_.Get(r.path, write);
      if (!f.ok()) {
        return FailedFuture(
            f.status().WithContext(RequestName(r.op, r.path, r.offset_bytes, r.size_bytes)));
      }
      files[i] = std::move(f).value();
    }
    auto n = CountSegments(r.op, *files[i], r.buf, r.offset_bytes, r.size_bytes);
    if (!n.ok()) return FailedFuture(n.status());
    segments += *n;
  }
  auto state = internal::MakeRequestState(segments);
  for (size_t i = 0; i < requests.size(); ++i) {
    const AioRequest& r = requests[i];
    if (r.size_bytes == 0) continue;
    Enqueue(r.op, files[i], static_cast<uint8_t*>(r.buf), r.offset_bytes, r.size_bytes, state);
  }
  return AioFuture(std::move(state));
}

Result<RegisteredBuffer> AioHandle::RegisterBuffer(void* p, size_t n) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    Status s = workers_[i]->RunOnWorker([&](IoEngine& e) { return e.RegisterBuffer(p, n); });
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) {
        workers_[j]->RunOnWorker([&](IoEngine& e) { return e.UnregisterBuffer(p); }).IgnoreError();
      }
      return s;
    }
  }
  RegisteredBuffer rb;
  rb.handle_ = this;
  rb.data_ = p;
  return rb;
}

void AioHandle::UnregisterBuffer(void* p) {
  for (auto& w : workers_) {
    w->RunOnWorker([&](IoEngine& e) { return e.UnregisterBuffer(p); }).IgnoreError();
  }
}

Status AioHandle::Close(const std::string& path) {
  auto f = files_.Remove(path);
  if (f == nullptr) return Status::Ok();
  const uint64_t id = f->id;
  for (auto& w : workers_) {
    STRATA_RETURN_IF_ERROR(w->RunOnWorker([id](IoEngine& e) {
      e.ForgetFile(id);
      return Status::Ok();
    }));
  }
  return Status::Ok();
}

Status AioHandle::Sync(const std::string& path) {
  auto f = files_.Get(path, false);
  if (!f.ok()) return f.status();
  int fd = (*f)->direct_fd >= 0 ? (*f)->direct_fd : (*f)->buffered_fd;
  if (::fdatasync(fd) != 0) return ErrnoToStatus(errno, "fdatasync " + path);
  return Status::Ok();
}

std::vector<int64_t> AioHandle::TakeLatencies() {
  std::vector<int64_t> all;
  for (auto& w : workers_) {
    auto l = w->TakeLatencies();
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

int AioHandle::TakeMaxReadsInFlight() {
  int most = 0;
  for (auto& w : workers_) most = std::max(most, w->TakeMaxReadsInFlight());
  return most;
}

std::string AioHandle::Describe() const {
  std::string s = workers_.front()->description();
  s += ", block " + FormatBytes(options_.block_size) + ", qd " +
       std::to_string(options_.queue_depth) + ", " + std::to_string(options_.thread_count) +
       (options_.thread_count == 1 ? " thread" : " threads");
  s += options_.overlap_events ? ", overlap" : ", lock-step";
  if (options_.single_submit) s += ", single submit";
  return s;
}

}  // namespace strata
