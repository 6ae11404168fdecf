// libaio backend (Linux native AIO). See io_engine.h for the contract.
#include <libaio.h>

#include <cerrno>
#include <ctime>
#include <vector>

#include "aio/engine/io_engine_backends.h"

namespace strata::internal {
namespace {

class LibaioEngine final : public IoEngine {
 public:
  ~LibaioEngine() override {
    if (ctx_ != nullptr) io_destroy(ctx_);
  }

  Status Init(const IoEngineOptions& o) {
    qd_ = o.queue_depth;
    int rc = io_setup(qd_, &ctx_);
    if (rc < 0) {
      ctx_ = nullptr;
      return ErrnoToStatus(-rc, "io_setup(" + std::to_string(qd_) + ")");
    }
    iocbs_.resize(static_cast<size_t>(qd_));
    ptrs_.resize(static_cast<size_t>(qd_));
    events_.resize(static_cast<size_t>(qd_));
    return Status::Ok();
  }

  std::string_view name() const override { return "libaio"; }
  int queue_depth() const override { return qd_; }

  Result<int> Submit(std::span<const IoRequest> reqs) override {
    int done = 0;
    while (done < static_cast<int>(reqs.size())) {
      int n = std::min<int>(qd_, static_cast<int>(reqs.size()) - done);
      for (int i = 0; i < n; ++i) {
        const IoRequest& r = reqs[static_cast<size_t>(done + i)];
        iocb* cb = &iocbs_[static_cast<size_t>(i)];
        if (r.op == IoOp::kRead) {
          io_prep_pread(cb, r.fd, r.buf, r.size_bytes, static_cast<long long>(r.offset_bytes));
        } else {
          io_prep_pwrite(cb, r.fd, r.buf, r.size_bytes, static_cast<long long>(r.offset_bytes));
        }
        cb->data = reinterpret_cast<void*>(static_cast<uintptr_t>(r.user_data));
        ptrs_[static_cast<size_t>(i)] = cb;
      }
      int rc;
      do {
        rc = io_submit(ctx_, n, ptrs_.data());
      } while (rc == -EINTR);
      if (rc < 0) {
        // EAGAIN: the kernel is short of resources; nothing of this call was taken. Report what
        // was accepted so far; the caller resubmits the rest after reaping.
        if (done > 0 || rc == -EAGAIN) return done;
        return ErrnoToStatus(-rc, "io_submit");
      }
      done += rc;
      if (rc < n) return done;  // the kernel took fewer: the caller retries the rest
    }
    return done;
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_us) override {
    if (out.empty()) return 0;
    long max = std::min<long>(static_cast<long>(out.size()), qd_);
    timespec ts{};
    timespec* tsp = nullptr;
    if (min_complete == 0) {
      tsp = &ts;  // poll
    } else if (timeout_us >= 0) {
      ts.tv_sec = timeout_us / 1000000;
      ts.tv_nsec = (timeout_us % 1000000) * 1000;
      tsp = &ts;
    }
    int rc;
    do {
      rc = io_getevents(ctx_, min_complete, max, events_.data(), tsp);
    } while (rc == -EINTR);
    if (rc < 0) return ErrnoToStatus(-rc, "io_getevents");
    for (int i = 0; i < rc; ++i) {
      out[static_cast<size_t>(i)].user_data =
          static_cast<uint64_t>(reinterpret_cast<uintptr_t>(events_[static_cast<size_t>(i)].data));
      // res is unsigned long in the ABI; negative errno values come back as its two's complement.
      out[static_cast<size_t>(i)].result = static_cast<long>(events_[static_cast<size_t>(i)].res);
    }
    return rc;
  }

 private:
  io_context_t ctx_ = nullptr;
  int qd_ = 0;
  std::vector<iocb> iocbs_;
  std::vector<iocb*> ptrs_;
  std::vector<io_event> events_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> CreateLibaioEngine(const IoEngineOptions& options) {
  auto e = std::make_unique<LibaioEngine>();
  STRATA_RETURN_IF_ERROR(e->Init(options));
  return std::unique_ptr<IoEngine>(std::move(e));
}

}  // namespace strata::internal
