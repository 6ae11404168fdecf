// io_uring backend (liburing). See io_engine.h for the contract.
#include "aio/engine/io_engine_backends.h"
#include "core/log.h"

#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <unordered_map>
#include <vector>

namespace strata::internal {
namespace {

constexpr unsigned kFileSlots = 256;

// Note [io_uring refused]
// A kernel may refuse io_uring outright: kernel.io_uring_disabled = 1 or 2 (EPERM), a container's
// seccomp profile (ENOSYS or EPERM), an LSM (EACCES). That is not an I/O error but a missing
// kernel feature: Unavailable, with what to do instead. `auto` then falls back to libaio.
Status QueueInitError(int err, unsigned entries) {
  Status cause = ErrnoToStatus(err, "io_uring_queue_init(" + std::to_string(entries) + ")");
  if (err != ENOSYS && err != EPERM && err != EACCES) return cause;
  std::string why = cause.message();
  std::ifstream knob("/proc/sys/kernel/io_uring_disabled");
  int disabled = 0;
  if (knob >> disabled && disabled != 0) {
    why += "; kernel.io_uring_disabled = " + std::to_string(disabled);
  } else if (err != EACCES) {
    why += "; a seccomp profile (e.g. a container's) may block it";
  }
  return Status(StatusCode::kUnavailable,
                "io_uring is refused by this kernel; use --engine libaio or auto "
                "(strata.aio_engine in a config): " +
                    why,
                err);
}
constexpr unsigned kBufferSlots = 64;

class UringEngine final : public IoEngine {
 public:
  ~UringEngine() override {
    if (!initialized_) return;
    // Cancel what is still in flight and wait (bounded) for it, so no request outlives the
    // ring (a worker tears a broken ring down with requests in it). Kernels before 6.0 refuse
    // this call; nothing is in flight in the ordinary case.
    io_uring_sync_cancel_reg reg;
    std::memset(&reg, 0, sizeof reg);
    reg.fd = -1;
    reg.flags = IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL;
    reg.timeout.tv_sec = 1;
    (void)io_uring_register_sync_cancel(&ring_, &reg);
    io_uring_queue_exit(&ring_);
  }

  Status Init(const IoEngineOptions& o) {
    qd_ = o.queue_depth;
    io_uring_params p;
    std::memset(&p, 0, sizeof p);
    // Completions can outnumber submissions briefly (resubmits): give the CQ headroom.
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = static_cast<unsigned>(qd_) * 4;
    if (o.sqpoll) {
      p.flags |= IORING_SETUP_SQPOLL;
      p.sq_thread_idle = 50;
    }
    int rc = io_uring_queue_init_params(static_cast<unsigned>(qd_), &ring_, &p);
    if (rc < 0) return QueueInitError(-rc, static_cast<unsigned>(qd_));
    initialized_ = true;
    sqpoll_ = o.sqpoll;
    if (o.fixed_files && io_uring_register_files_sparse(&ring_, kFileSlots) == 0) {
      fixed_files_ = true;
      file_slot_owner_.assign(kFileSlots, 0);
    }
    if (o.registered_buffers && io_uring_register_buffers_sparse(&ring_, kBufferSlots) == 0) {
      registered_buffers_ = true;
      buffers_.assign(kBufferSlots, {});
    }
    return Status::Ok();
  }

  std::string_view name() const override { return "io_uring"; }
  int queue_depth() const override { return qd_; }

  std::string Describe() const override {
    std::string s = "io_uring (";
    s += fixed_files_ ? "fixed files" : "plain files";
    s += registered_buffers_ ? ", registered buffers" : "";
    s += sqpoll_ ? ", SQPOLL" : "";
    return s + ")";
  }

  // Note [Submission contract]
  // An sqe handed out by io_uring_get_sqe is in the ring once io_uring_submit publishes the tail,
  // whether or not io_uring_enter then succeeds; it cannot be taken back. So Submit() reports
  // every prepared request as accepted, and Flush() keeps pushing the ring's unsubmitted entries
  // (again before every Reap) instead of failing requests the kernel may still run.
  Result<int> Submit(std::span<const IoRequest> reqs) override {
    int prepared = 0;
    for (const IoRequest& r : reqs) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        if (Status s = Flush(); !s.ok()) {
          if (prepared == 0) return s;
          LogError(s.ToString());  // what was prepared is in the ring: accepted (see the note)
          return prepared;
        }
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;  // ring full: the caller resubmits the rest later
      }
      int fd = r.fd;
      bool fixed = false;
      if (fixed_files_ && r.file_id != 0) {
        int slot = FileSlot(r.file_id, r.fd);
        if (slot >= 0) fd = slot, fixed = true;
      }
      int buf_index = registered_buffers_ ? BufferIndex(r.buf, r.size_bytes) : -1;
      if (r.op == IoOp::kRead) {
        if (buf_index >= 0) {
          io_uring_prep_read_fixed(sqe, fd, r.buf, r.size_bytes, r.offset_bytes, buf_index);
        } else {
          io_uring_prep_read(sqe, fd, r.buf, r.size_bytes, r.offset_bytes);
        }
      } else {
        if (buf_index >= 0) {
          io_uring_prep_write_fixed(sqe, fd, r.buf, r.size_bytes, r.offset_bytes, buf_index);
        } else {
          io_uring_prep_write(sqe, fd, r.buf, r.size_bytes, r.offset_bytes);
        }
      }
      if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, r.user_data);
      ++prepared;
    }
    Status s = Flush();
    if (!s.ok()) {
      // The prepared entries are in the ring and may still run: report them accepted (see the
      // note); the broken ring shows up as a Reap error.
      LogError(s.ToString());
    }
    return prepared;
  }

  // Pushes unsubmitted ring entries to the kernel. EAGAIN/EBUSY leave them queued for the next
  // call (Reap flushes first); other errors mean the ring is unusable.
  Status Flush() {
    while (io_uring_sq_ready(&ring_) > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR) continue;
      if (rc == -EAGAIN || rc == -EBUSY) return Status::Ok();
      if (rc < 0) return ErrnoToStatus(-rc, "io_uring_submit");
      if (rc == 0 || sqpoll_) break;  // SQPOLL: the kernel thread consumes them on its own
    }
    return Status::Ok();
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override {
    if (out.empty()) return 0;
    STRATA_RETURN_IF_ERROR(Flush());
    if (min_complete > 0 && io_uring_cq_ready(&ring_) < static_cast<unsigned>(min_complete)) {
      __kernel_timespec ts{};
      __kernel_timespec* tsp = nullptr;
      if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1000000;
        ts.tv_nsec = (timeout_us % 1000000) * 1000;
        tsp = &ts;
      }
      io_uring_cqe* cqe = nullptr;
      for (;;) {
        int rc =
            io_uring_wait_cqes(&ring_, &cqe, static_cast<unsigned>(min_complete), tsp, nullptr);
        if (rc == -EINTR) continue;
        if (rc == -ETIME || rc == -EAGAIN) break;
        if (rc < 0) return ErrnoToStatus(-rc, "io_uring_wait_cqes");
        break;
      }
    }
    int n = 0;
    unsigned head;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (n == static_cast<int>(out.size())) break;
      out[n].user_data = io_uring_cqe_get_data64(cqe);
      out[n].result = cqe->res;
      ++n;
    }
    io_uring_cq_advance(&ring_, static_cast<unsigned>(n));
    return n;
  }

  Status RegisterBuffer(void* p, size_t size) override {
    if (!registered_buffers_) return UnimplementedError("io_uring: buffer registration is off");
    for (unsigned i = 0; i < kBufferSlots; ++i) {
      if (buffers_[i].size != 0) continue;
      iovec iov{p, size};
      __u64 tag = 0;
      int rc = io_uring_register_buffers_update_tag(&ring_, i, &iov, &tag, 1);
      if (rc < 0)
        return ErrnoToStatus(-rc,
                             "io_uring: register buffer of " + std::to_string(size) + " bytes");
      buffers_[i] = {reinterpret_cast<uintptr_t>(p), size};
      return Status::Ok();
    }
    return UnavailableError("io_uring: all " + std::to_string(kBufferSlots) +
                            " registered-buffer slots are in use");
  }

  Status UnregisterBuffer(void* p) override {
    if (!registered_buffers_) return Status::Ok();
    for (unsigned i = 0; i < kBufferSlots; ++i) {
      if (buffers_[i].base != reinterpret_cast<uintptr_t>(p) || buffers_[i].size == 0) continue;
      iovec iov{nullptr, 0};
      __u64 tag = 0;
      int rc = io_uring_register_buffers_update_tag(&ring_, i, &iov, &tag, 1);
      buffers_[i] = {};
      if (rc < 0) return ErrnoToStatus(-rc, "io_uring: unregister buffer");
      return Status::Ok();
    }
    return Status::Ok();
  }

  void ForgetFile(uint64_t file_id) override {
    auto it = slot_of_file_.find(file_id);
    if (it == slot_of_file_.end()) return;
    int minus_one = -1;
    io_uring_register_files_update(&ring_, static_cast<unsigned>(it->second), &minus_one, 1);
    file_slot_owner_[it->second] = 0;
    slot_of_file_.erase(it);
  }

 private:
  struct Registered {
    uintptr_t base = 0;
    size_t size = 0;
  };

  // Slot of a registered file, registering it on first use. -1: use the plain fd.
  int FileSlot(uint64_t file_id, int fd) {
    auto it = slot_of_file_.find(file_id);
    if (it != slot_of_file_.end()) return it->second;
    int slot = -1;
    for (unsigned i = 0; i < kFileSlots; ++i) {
      if (file_slot_owner_[i] == 0) {
        slot = static_cast<int>(i);
        break;
      }
    }
    // All slots taken: use the plain descriptor. Never evict: a request already prepared in
    // this batch (or queued under SQPOLL) may name the slot.
    if (slot < 0) return -1;
    if (io_uring_register_files_update(&ring_, static_cast<unsigned>(slot), &fd, 1) != 1) {
      file_slot_owner_[slot] = 0;
      return -1;
    }
    file_slot_owner_[slot] = file_id;
    slot_of_file_[file_id] = slot;
    return slot;
  }

  int BufferIndex(const void* p, size_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    for (unsigned i = 0; i < kBufferSlots; ++i) {
      const Registered& b = buffers_[i];
      if (b.size != 0 && a >= b.base && a + n <= b.base + b.size) return static_cast<int>(i);
    }
    return -1;
  }

  io_uring ring_{};
  bool initialized_ = false;
  int qd_ = 0;
  bool sqpoll_ = false;
  bool fixed_files_ = false;
  bool registered_buffers_ = false;
  std::vector<uint64_t> file_slot_owner_;
  std::unordered_map<uint64_t, int> slot_of_file_;
  std::vector<Registered> buffers_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> CreateUringEngine(const IoEngineOptions& options) {
  auto e = std::make_unique<UringEngine>();
  STRATA_RETURN_IF_ERROR(e->Init(options));
  return std::unique_ptr<IoEngine>(std::move(e));
}

}  // namespace strata::internal
