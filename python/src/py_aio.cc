// strata._C.Handle and strata._C.PinnedMemory: DeepSpeed's aio handle API on Strata's AioHandle.
//
// Methods and meanings follow DeepSpeed's `aio_handle`: sync_pread/sync_pwrite return 1 (one
// request completed), async_pread/async_pwrite return 0 and queue the request, wait() blocks
// until every queued request is done and returns how many there were. Unlike DeepSpeed, a
// failed or short request is never a count: it raises OSError(errno, message, filename) with
// `offset` set (a read past the end of a file included). Queued requests are not ordered (reads
// go out first, aio/aio_handle.h): wait() for an async_pwrite before reading the bytes it writes.
//
// Threads: the GIL is released while requests run (sync calls, wait()). The handle may be used
// from several Python threads; its bookkeeping is only touched with the GIL held.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "python/src/py_buffer.h"
#include "python/src/py_errors.h"

namespace py = pybind11;

namespace strata::python {
namespace {

// Memory from AlignedBuffer (2 MiB-aligned, huge pages, mlocked when the limit allows), exposed
// with the buffer protocol so torch.frombuffer / numpy.frombuffer can wrap it without copying.
// Whoever wraps it keeps a reference, so the memory lives as long as the last tensor on it.
class PinnedMemory {
 public:
  PinnedMemory(AlignedBuffer buffer, size_t size_bytes)
      : buffer_(std::move(buffer)), size_bytes_(size_bytes) {}

  py::buffer_info Info() {
    return py::buffer_info(buffer_.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(size_bytes_)}, {py::ssize_t{1}},
                           /*readonly=*/false);
  }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(buffer_.data()); }
  size_t size_bytes() const { return size_bytes_; }
  bool locked() const { return buffer_.locked(); }
  std::string Describe() const { return buffer_.Describe(); }

 private:
  AlignedBuffer buffer_;
  size_t size_bytes_;
};

class Handle {
 public:
  Handle(int64_t block_size, int queue_depth, bool single_submit, bool overlap_events,
         int intra_op_parallelism, const std::string& engine, bool allow_buffered,
         bool keep_files_open)
      : keep_files_open_(keep_files_open) {
    AioOptions o;
    if (block_size <= 0) {
      throw py::value_error("block_size " + std::to_string(block_size) +
                            " must be a positive multiple of 4096");
    }
    o.block_size = static_cast<size_t>(block_size);
    o.queue_depth = queue_depth;
    o.single_submit = single_submit;
    o.overlap_events = overlap_events;
    o.thread_count = intra_op_parallelism;
    o.allow_buffered = allow_buffered;
    auto kind = ParseIoEngineKind(engine);
    ThrowIfError(kind.status());
    o.engine = *kind;
    auto h = AioHandle::Create(o);
    ThrowIfError(h.status());
    handle_ = std::move(h).value();
  }

  int SyncIo(IoOp op, py::handle tensor, py::handle file, int64_t offset) {
    Request r = Prepare(op, tensor, file, offset);
    Result<size_t> done = [&]() -> Result<size_t> {
      py::gil_scoped_release nogil;
      return op == IoOp::kRead ? handle_->Pread(r.path, r.buf.data, r.buf.size_bytes(), r.offset)
                               : handle_->Pwrite(r.path, r.buf.data, r.buf.size_bytes(), r.offset);
    }();
    Finish(r.path);
    if (!done.ok()) ThrowIoError(done.status(), r.path, r.offset);
    return 1;
  }

  int AsyncIo(IoOp op, py::handle tensor, py::handle file, int64_t offset) {
    Request r = Prepare(op, tensor, file, offset);
    r.future = op == IoOp::kRead
                   ? handle_->SubmitRead(r.path, r.buf.data, r.buf.size_bytes(), r.offset)
                   : handle_->SubmitWrite(r.path, r.buf.data, r.buf.size_bytes(), r.offset);
    pending_.push_back(std::move(r));
    return 0;
  }

  // Waits for every queued request; raises the first failure (after all have finished, so no
  // buffer is still in use), else returns how many completed.
  int Wait() {
    std::vector<Request> batch = std::exchange(pending_, {});
    std::vector<Status> results(batch.size());
    {
      py::gil_scoped_release nogil;
      for (size_t i = 0; i < batch.size(); ++i) {
        auto r = batch[i].future.Wait();
        if (!r.ok()) results[i] = r.status();
      }
    }
    for (const Request& r : batch) Finish(r.path);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!results[i].ok()) ThrowIoError(results[i], batch[i].path, batch[i].offset);
    }
    return static_cast<int>(batch.size());
  }

  PinnedMemory NewPinnedMemory(int64_t size_bytes) {
    if (size_bytes < 0) throw py::value_error("pinned size must be >= 0");
    AlignedBufferOptions o;
    o.huge_pages = true;
    o.lock = true;
    auto b = [&] {
      py::gil_scoped_release nogil;  // populating a large buffer takes a while
      return AlignedBuffer::Allocate(std::max<size_t>(static_cast<size_t>(size_bytes), 1), o);
    }();
    ThrowIfError(b.status());
    return PinnedMemory(std::move(b).value(), static_cast<size_t>(size_bytes));
  }

  int pending() const { return static_cast<int>(pending_.size()); }
  const AioOptions& options() const { return handle_->options(); }
  std::string Describe() const { return handle_->Describe(); }

 private:
  struct Request {
    BufferRef buf;
    std::string path;
    uint64_t offset = 0;
    AioFuture future;
  };

  Request Prepare(IoOp op, py::handle tensor, py::handle file, int64_t offset) {
    if (offset < 0) {
      throw py::value_error("file offset " + std::to_string(offset) + " must be >= 0");
    }
    Request r;
    r.buf = GetBuffer(tensor, "buffer", /*need_writable=*/op == IoOp::kRead);
    r.path = GetPath(file);
    r.offset = static_cast<uint64_t>(offset);
    ++in_use_[r.path];
    return r;
  }

  // One request on `path` is over. Unless files are kept open, the last one closes the file, so
  // the next request sees the file as it is on disk then (DeepSpeed opens per request: a file
  // replaced in between is the new file).
  void Finish(const std::string& path) {
    auto it = in_use_.find(path);
    if (it == in_use_.end() || --it->second > 0) return;
    in_use_.erase(it);
    if (keep_files_open_) return;
    Status st = [&] {
      py::gil_scoped_release nogil;
      return handle_->Close(path);
    }();
    st.IgnoreError();  // closing a descriptor cannot lose data that was not already reported
  }

  bool keep_files_open_;
  std::unordered_map<std::string, int> in_use_;
  // Declared before handle_: the handle is destroyed first, completing queued requests, and only
  // then are the buffers they use released.
  std::vector<Request> pending_;
  std::unique_ptr<AioHandle> handle_;
};

}  // namespace

void RegisterAio(py::module_& m) {
  py::class_<PinnedMemory>(m, "PinnedMemory", py::buffer_protocol(),
                           "Huge-page, page-locked host memory (Strata's AlignedBuffer) with the "
                           "buffer protocol. Lives while any tensor or view wraps it.")
      .def_buffer(&PinnedMemory::Info)
      .def_property_readonly("address", &PinnedMemory::address)
      .def_property_readonly("size_bytes", &PinnedMemory::size_bytes)
      .def_property_readonly("locked", &PinnedMemory::locked,
                             "Whether mlock succeeded (else the memory is pageable).")
      .def("__len__", &PinnedMemory::size_bytes)
      .def("__repr__", [](const PinnedMemory& p) {
        return "<strata PinnedMemory " + std::to_string(p.size_bytes()) + " B, " + p.Describe() +
               ">";
      });

  py::class_<Handle>(m, "Handle", "Strata's async file I/O handle (DeepSpeed aio_handle API).")
      .def(py::init<int64_t, int, bool, bool, int, const std::string&, bool, bool>(),
           py::arg("block_size") = 1 << 20, py::arg("queue_depth") = 8,
           py::arg("single_submit") = false, py::arg("overlap_events") = true,
           py::arg("intra_op_parallelism") = 1, py::kw_only(), py::arg("engine") = "auto",
           py::arg("allow_buffered") = false, py::arg("keep_files_open") = false)
      .def(
          "sync_pread",
          [](Handle& h, py::handle t, py::handle f, int64_t off) {
            return h.SyncIo(IoOp::kRead, t, f, off);
          },
          py::arg("buffer"), py::arg("filename"), py::arg("file_offset") = 0)
      .def(
          "sync_pwrite",
          [](Handle& h, py::handle t, py::handle f, int64_t off) {
            return h.SyncIo(IoOp::kWrite, t, f, off);
          },
          py::arg("buffer"), py::arg("filename"), py::arg("file_offset") = 0)
      .def(
          "async_pread",
          [](Handle& h, py::handle t, py::handle f, int64_t off) {
            return h.AsyncIo(IoOp::kRead, t, f, off);
          },
          py::arg("buffer"), py::arg("filename"), py::arg("file_offset") = 0)
      .def(
          "async_pwrite",
          [](Handle& h, py::handle t, py::handle f, int64_t off) {
            return h.AsyncIo(IoOp::kWrite, t, f, off);
          },
          py::arg("buffer"), py::arg("filename"), py::arg("file_offset") = 0)
      .def("wait", &Handle::Wait)
      .def("_new_pinned_memory", &Handle::NewPinnedMemory, py::arg("size_bytes"))
      .def_property_readonly("pending", &Handle::pending)
      .def("get_block_size", [](const Handle& h) { return h.options().block_size; })
      .def("get_queue_depth", [](const Handle& h) { return h.options().queue_depth; })
      .def("get_single_submit", [](const Handle& h) { return h.options().single_submit; })
      .def("get_overlap_events", [](const Handle& h) { return h.options().overlap_events; })
      .def("get_intra_op_parallelism", [](const Handle& h) { return h.options().thread_count; })
      .def("get_thread_count", [](const Handle& h) { return h.options().thread_count; })
      .def("describe", &Handle::Describe)
      .def("__repr__", [](const Handle& h) { return "<strata.aio.Handle " + h.Describe() + ">"; });
}

}  // namespace strata::python
