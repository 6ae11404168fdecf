#include "aio/aio_handle.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "aio/aio_request.h"
#include "aio/aio_worker.h"
#include "core/units.h"

namespace strata {

using internal::RequestState;
using internal::Segment;

bool AioFuture::ready() const { return state_ == nullptr || state_->ready(); }

Result<size_t> AioFuture::Wait() const {
  if (state_ == nullptr) return FailedPreconditionError("wait on an empty AioFuture");
  return state_->Wait();
}

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

// Note [Splitting a request]
// The aligned middle [a, e) of a request goes O_DIRECT, cut into one slice per thread at
// multiples of the file's split alignment (>= the page size). The unaligned head [off, a) and
// tail [e, end) are small (< one page each) and go through the page cache on the first and last
// thread; because the split points are page multiples, a buffered edge never shares a
// page-cache page with this request's direct range. Files without O_DIRECT are sliced evenly.
AioFuture AioHandle::Submit(std::span<const AioRequest> requests) {
  std::vector<Segment> segs;
  const auto threads = static_cast<uint64_t>(workers_.size());
  std::vector<int> worker_of;
  auto add = [&](const std::shared_ptr<OpenFile>& f, const AioRequest& r, uint8_t* base,
                 uint64_t from, uint64_t to, bool buffered, int fd, int worker) {
    Segment s;
    s.file = f;
    s.op = r.op;
    s.buf = base + (from - r.offset_bytes);
    s.offset = from;
    s.size = to - from;
    s.buffered = buffered;
    s.fd = fd;
    segs.push_back(std::move(s));
    worker_of.push_back(worker);
  };
  auto failed = [](Status st) {
    auto state = std::make_shared<RequestState>(1);
    state->SegmentDone(std::move(st), 0);
    return AioFuture(std::move(state));
  };
  static std::atomic<uint64_t> round_robin{0};
  for (const AioRequest& r : requests) {
    if (r.size_bytes == 0) continue;
    Status bad;
    if (r.buf == nullptr) bad = InvalidArgumentError("null buffer");
    auto file = bad.ok() ? files_.Get(r.path, r.op == IoOp::kWrite)
                         : Result<std::shared_ptr<OpenFile>>(bad);
    if (!file.ok()) {
      return failed(file.status().WithContext(
          std::string(r.op == IoOp::kRead ? "read " : "write ") + r.path + " @ " +
          std::to_string(r.offset_bytes) + " (" + FormatBytes(r.size_bytes) + ")"));
    }
    const std::shared_ptr<OpenFile>& f = *file;
    auto* base = static_cast<uint8_t*>(r.buf);
    const uint64_t off = r.offset_bytes, end = r.offset_bytes + r.size_bytes;
    if (f->direct_fd < 0) {
      for (uint64_t k = 0; k < threads; ++k) {
        uint64_t s = off + r.size_bytes * k / threads, e = off + r.size_bytes * (k + 1) / threads;
        if (e > s) add(f, r, base, s, e, false, f->buffered_fd, static_cast<int>(k));
      }
      continue;
    }
    const uint64_t A = f->split_align;
    if (options_.block_size % A != 0) {
      return failed(InvalidArgumentError("aio block_size " + std::to_string(options_.block_size) +
                                         " is not a multiple of the O_DIRECT alignment " +
                                         std::to_string(A) + " of " + r.path));
    }
    const uint64_t a = (off + A - 1) / A * A, e = end / A * A;
    if (e <= a) {
      add(f, r, base, off, end, true, f->buffered_fd, static_cast<int>(round_robin++ % threads));
      continue;
    }
    if (a > off) add(f, r, base, off, a, true, f->buffered_fd, 0);
    if (end > e) add(f, r, base, e, end, true, f->buffered_fd, static_cast<int>(threads - 1));
    const uint64_t blocks = (e - a) / A;
    for (uint64_t k = 0; k < threads; ++k) {
      uint64_t s = a + A * (blocks * k / threads), t = a + A * (blocks * (k + 1) / threads);
      if (t > s) add(f, r, base, s, t, false, f->direct_fd, static_cast<int>(k));
    }
  }
  auto state = std::make_shared<RequestState>(static_cast<int>(segs.size()));
  for (size_t i = 0; i < segs.size(); ++i) {
    segs[i].request = state;
    workers_[static_cast<size_t>(worker_of[i])]->Enqueue(std::move(segs[i]));
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

std::string AioHandle::Describe() const {
  std::string s = workers_.front()->engine().Describe();
  s += ", block " + FormatBytes(options_.block_size) + ", qd " +
       std::to_string(options_.queue_depth) + ", " + std::to_string(options_.thread_count) +
       (options_.thread_count == 1 ? " thread" : " threads");
  s += options_.overlap_events ? ", overlap" : ", lock-step";
  if (options_.single_submit) s += ", single submit";
  return s;
}

}  // namespace strata
