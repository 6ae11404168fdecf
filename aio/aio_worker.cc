#include "aio/aio_worker.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"
#include "core/units.h"

namespace strata::internal {
namespace {

std::string PieceName(IoOp op, const OpenFile& f, uint64_t offset, uint64_t size) {
  return std::string(op == IoOp::kRead ? "read " : "write ") + f.path + " @ " +
         std::to_string(offset) + " (" + FormatBytes(size) + ")";
}

// Note [End of file is DataLoss]
// A read that reaches the end of the file before its last byte is DataLoss, never short data
// (core/status.h: "file truncated"): the bytes asked for are not there. The message names the
// read and the file's real size.
Status EndOfFile(const OpenFile& f, uint64_t offset, uint64_t size) {
  struct stat st;
  std::string ends = ::fstat(f.buffered_fd, &st) == 0
                         ? "the file ends at offset " + std::to_string(st.st_size)
                         : "the file ends at offset " + std::to_string(offset);
  return DataLossError(PieceName(IoOp::kRead, f, offset, size) + ": " + ends +
                       " (short file: truncated, or read past what was written)");
}

// pread/pwrite until done; short transfers continue, EOF on read is DataLoss.
Status BufferedIo(IoOp op, const OpenFile& f, uint8_t* buf, uint64_t size, uint64_t offset) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t n =
        op == IoOp::kRead
            ? ::pread(f.buffered_fd, buf + done, size - done, static_cast<off_t>(offset + done))
            : ::pwrite(f.buffered_fd, buf + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoToStatus(errno, PieceName(op, f, offset + done, size - done));
    }
    if (n == 0) {
      if (op == IoOp::kRead) return EndOfFile(f, offset + done, size - done);
      return IoError(PieceName(op, f, offset + done, size - done) + ": no progress");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// Note [Waiting with room]
// In overlap mode, while pieces are in the kernel and slots are free, the worker waits for a
// completion only briefly, so that a segment enqueued meanwhile is issued soon. Each such wait
// that ends with nothing completed doubles the next one, up to kMaxRoomWaitUs; a completion or a
// new segment brings it back to kMinRoomWaitUs. Polling every 200 us for as long as a piece is
// out is what it must not do: a write's completion may need a kernel worker (ext4 finishes an
// O_DIRECT write to fallocated space in a per-CPU kworker of the CPU that took the interrupt),
// and a thread waking 5000 times a second - with an MPI rank bound to the same CPU busy-polling a
// collective - kept that kworker off the CPU indefinitely: the write never completed, the rank
// waited for it forever and its peer waited for the rank (engine_param_nvme_mpi_world2).
constexpr int64_t kMinRoomWaitUs = 200;
constexpr int64_t kMaxRoomWaitUs = 2000;  // a new segment waits at most this for the wait to end

}  // namespace

AioWorker::AioWorker(int index, std::unique_ptr<IoEngine> engine, AlignedBuffer bounce,
                     const AioOptions& options)
    : index_(index),
      options_(options),
      engine_(std::move(engine)),
      description_(engine_->Describe()),
      bounce_(std::move(bounce)),
      room_wait_us_(kMinRoomWaitUs) {
  const auto qd = static_cast<size_t>(options_.queue_depth);
  slots_.resize(qd);
  for (size_t i = qd; i-- > 0;) free_slots_.push_back(static_cast<int>(i));
  batch_.reserve(qd);
  retry_.reserve(qd);
  completions_.resize(qd);
  thread_ = std::thread([this] { Run(); });
  pthread_setname_np(thread_.native_handle(), ("strata-aio-" + std::to_string(index_)).c_str());
}

AioWorker::~AioWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AioWorker::Enqueue(Segment segment) {
  {
    std::lock_guard lock(mu_);
    if (spare_.empty()) spare_.emplace_back();  // grows to the peak number of segments, once
    spare_.front() = std::move(segment);
    queue_.splice(queue_.end(), spare_, spare_.begin());
  }
  cv_.notify_one();
}

Status AioWorker::RunOnWorker(std::function<Status(IoEngine&)> fn) {
  Status result;
  bool done = false;
  std::unique_lock lock(mu_);
  controls_.push_back(Control{std::move(fn), &result, &done});
  cv_.notify_one();
  control_cv_.wait(lock, [&] { return done; });
  return result;
}

void AioWorker::Run() {
  std::deque<Control> controls;
  for (;;) {
    bool took = false;
    {
      std::unique_lock lock(mu_);
      if (queue_.empty() && controls_.empty() && active_.empty()) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !controls_.empty(); });
        if (stop_ && queue_.empty() && controls_.empty()) return;
      }
      took = !queue_.empty();
      active_.splice(active_.end(), queue_);
      controls.swap(controls_);
    }
    if (took) {
      OpenTraceBatch();
      room_wait_us_ = kMinRoomWaitUs;  // new work: look for more soon (Note [Waiting with room])
    }
    if (!controls.empty()) RunControls(controls);
    if (!broken_.ok()) {
      for (Segment& seg : active_) Fail(seg, broken_);
      FinishSegments();
      continue;
    }
    for (Segment& seg : active_) {
      if (seg.buffered && seg.issued == 0) DoBuffered(seg);
    }
    SubmitRetries();
    if (options_.overlap_events || inflight_ == 0) IssuePieces();
    const int in_kernel = inflight_ - static_cast<int>(retry_.size());
    if (in_kernel == 0 && !retry_.empty()) {
      // The kernel refused everything (EAGAIN): pause briefly instead of spinning.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (in_kernel > 0) {
      // Lock-step mode waits for the whole batch. Otherwise wait for one completion, but only
      // for a while when there is room for more: new segments may arrive meanwhile (Note
      // [Waiting with room]).
      const int min = options_.overlap_events ? 1 : in_kernel;
      const bool room = options_.overlap_events && !free_slots_.empty();
      auto n = engine_->Reap(completions_, min, room ? room_wait_us_ : -1);
      if (!n.ok()) {
        OnReapError(n.status());
      } else {
        reap_failures_ = 0;
        for (int i = 0; i < *n; ++i) Complete(completions_[static_cast<size_t>(i)]);
        room_wait_us_ = *n > 0 ? kMinRoomWaitUs : std::min(room_wait_us_ * 2, kMaxRoomWaitUs);
      }
    }
    FinishSegments();
  }
}

// Note [A broken engine]
// Pieces still in the kernel may yet write into their buffers, so their requests cannot complete
// before their completions arrive. A reap error therefore fails the active segments (no new
// pieces) and reaping goes on after a short, growing pause. When it keeps failing (a broken
// ring), completions may never come: after kMaxReapFailures in a row the engine is destroyed,
// which cancels what is in flight (io_uring: a bounded synchronous cancel, then the ring is
// closed; libaio: io_destroy cancels and waits), and every piece left completes as Aborted. The
// handle stays usable as an object - waiters return, it can be destroyed - but each later request
// on this thread fails at once as Aborted, naming the reap error. Bounded: the pauses add up to
// about 0.13 s.
void AioWorker::OnReapError(const Status& error) {
  constexpr int kMaxReapFailures = 8;
  const Status s = error.WithContext("aio reap");
  for (Segment& seg : active_) Fail(seg, s);
  static std::atomic<bool> said{false};
  LogOnce(said, LogLevel::kError, s.ToString());
  if (++reap_failures_ >= kMaxReapFailures) {
    TearDown(s);
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1 << std::min(reap_failures_, 5)));
}

void AioWorker::TearDown(const Status& cause) {
  broken_ = AbortedError("aio thread " + std::to_string(index_) + ": the " + description_ +
                         " engine was torn down after a lasting reap error (" + cause.message() +
                         "); requests on this handle fail");
  LogError(broken_.ToString());
  engine_.reset();  // cancels what is still in flight (see the note)
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].seg == nullptr) continue;
    Fail(*slots_[s].seg, broken_);
    Release(static_cast<int>(s));
  }
  retry_.clear();
  batch_.clear();
  for (Segment& seg : active_) Fail(seg, broken_);
}

void AioWorker::RunControls(std::deque<Control>& controls) {
  for (Control& c : controls) {
    Status s = engine_ != nullptr ? c.fn(*engine_) : broken_;
    std::lock_guard lock(mu_);
    *c.result = std::move(s);
    *c.done = true;
  }
  controls.clear();
  control_cv_.notify_all();
}

void AioWorker::DoBuffered(Segment& seg) {
  seg.issued = seg.size;
  Status s = BufferedIo(seg.op, *seg.file, seg.buf, seg.size, seg.offset);
  if (s.ok()) {
    seg.completed = seg.size;
  } else {
    Fail(seg, s);
  }
}

IoRequest AioWorker::MakeRequest(int s) const {
  const Slot& sl = slots_[static_cast<size_t>(s)];
  IoRequest r;
  r.op = sl.seg->op;
  r.fd = sl.seg->fd;
  r.file_id = options_.fixed_files ? sl.seg->file->id : 0;
  r.buf = sl.io_buf + sl.done;
  r.size_bytes = sl.size - sl.done;
  r.offset_bytes = sl.offset + sl.done;
  r.user_data = static_cast<uint64_t>(s);
  return r;
}

uint8_t* AioWorker::BounceFor(int s) {
  if (bounce_.size() == 0) {
    AlignedBufferOptions o;
    o.populate = false;
    auto b = AlignedBuffer::Allocate(options_.block_size * slots_.size(), o);
    if (!b.ok()) return nullptr;
    bounce_ = std::move(b).value();
  }
  return bounce_.bytes() + options_.block_size * static_cast<size_t>(s);
}

// Note [Reads first]
// Free slots go to the pieces of queued reads before those of queued writes: a reader waits for
// its bytes (the optimizer step needs the next sub-group's state to go on), a writer only for its
// buffer to come back, so a read queued behind a long write no longer waits for all of it. The
// priority is bounded: after queue_depth read pieces in a row the writes' pieces go first for a
// round, so a steady stream of reads cannot hold a write back for ever. Reads and writes in
// flight together were never ordered (pieces complete in any order), so no caller relies on a
// read issued after a write of the same bytes seeing them: it waits for the write (aio_handle.h).
void AioWorker::IssuePieces() {
  const bool writes_turn = reads_in_a_row_ >= slots_.size();
  for (const IoOp op :
       {writes_turn ? IoOp::kWrite : IoOp::kRead, writes_turn ? IoOp::kRead : IoOp::kWrite}) {
    IssuePiecesOf(op);
  }
  SubmitBatch();
}

void AioWorker::IssuePiecesOf(IoOp op) {
  for (Segment& seg : active_) {
    if (free_slots_.empty()) break;
    if (seg.buffered || !seg.status.ok() || seg.op != op) continue;
    const bool direct = seg.fd == seg.file->direct_fd;
    while (seg.issued < seg.size && !free_slots_.empty()) {
      const int s = free_slots_.back();
      Slot& sl = slots_[static_cast<size_t>(s)];
      sl.seg = &seg;
      sl.user_buf = seg.buf + seg.issued;
      sl.offset = seg.offset + seg.issued;
      sl.size =
          static_cast<uint32_t>(std::min<uint64_t>(options_.block_size, seg.size - seg.issued));
      sl.done = 0;
      sl.io_buf = sl.user_buf;
      if (options_.record_latency) sl.start_ns = SteadyNowNs();
      if (direct && reinterpret_cast<uintptr_t>(sl.user_buf) % seg.file->align.mem_align != 0) {
        // The caller's buffer is not O_DIRECT-aligned: go through this slot's bounce region.
        sl.io_buf = BounceFor(s);
        if (sl.io_buf == nullptr) {
          Fail(seg, OutOfMemoryError("cpu: no memory for the aio bounce buffer"));
          break;
        }
        if (seg.op == IoOp::kWrite) std::memcpy(sl.io_buf, sl.user_buf, sl.size);
      }
      free_slots_.pop_back();
      seg.issued += sl.size;
      ++seg.inflight;
      ++inflight_;
      if (op == IoOp::kRead) CountRead(1);
      reads_in_a_row_ = op == IoOp::kRead ? reads_in_a_row_ + 1 : 0;
      batch_.push_back(MakeRequest(s));
      if (options_.single_submit) SubmitBatch();
    }
  }
}

void AioWorker::SubmitRetries() {
  if (retry_.empty()) return;
  for (int s : retry_) batch_.push_back(MakeRequest(s));
  retry_.clear();
  SubmitBatch();
}

void AioWorker::SubmitBatch() {
  if (batch_.empty()) return;
  auto r = engine_->Submit(batch_);
  size_t accepted = r.ok() ? static_cast<size_t>(*r) : 0;
  for (size_t i = accepted; i < batch_.size(); ++i) {
    const int s = static_cast<int>(batch_[i].user_data);
    if (r.ok()) {
      retry_.push_back(s);  // the kernel took fewer than asked: try again next round
    } else {
      Slot& sl = slots_[static_cast<size_t>(s)];
      Fail(*sl.seg, r.status().WithContext(
                        PieceName(sl.seg->op, *sl.seg->file, sl.offset, sl.size) + ": submit"));
      Release(s);
    }
  }
  batch_.clear();
}

void AioWorker::Release(int s) {
  Slot& sl = slots_[static_cast<size_t>(s)];
  if (sl.seg->op == IoOp::kRead) CountRead(-1);
  --sl.seg->inflight;
  --inflight_;
  sl.seg = nullptr;
  free_slots_.push_back(s);
}

void AioWorker::Complete(const IoCompletion& c) {
  const int s = static_cast<int>(c.user_data);
  Slot& sl = slots_[static_cast<size_t>(s)];
  Segment& seg = *sl.seg;
  const OpenFile& f = *seg.file;
  const uint32_t want = sl.size - sl.done;
  if (c.result < 0) {
    const int err = static_cast<int>(-c.result);
    if (err == EAGAIN || err == EINTR) {
      retry_.push_back(s);
      return;
    }
    Fail(seg, ErrnoToStatus(err, PieceName(seg.op, f, sl.offset + sl.done, want)));
    Release(s);
    return;
  }
  const auto got = static_cast<uint64_t>(c.result);
  if (got == 0 || got > want) {
    if (got == 0 && seg.op == IoOp::kRead) {
      Fail(seg, EndOfFile(f, sl.offset + sl.done, want));
    } else {
      Fail(seg, IoError(PieceName(seg.op, f, sl.offset + sl.done, want) +
                        (got == 0 ? ": no progress"
                                  : ": engine reported " + std::to_string(got) + " bytes")));
    }
    Release(s);
    return;
  }
  sl.done += static_cast<uint32_t>(got);
  if (sl.done < sl.size) {
    // Short transfer: continue where it stopped. O_DIRECT needs the rest aligned; a rare
    // unaligned remainder is finished with buffered I/O.
    const bool direct = seg.fd == f.direct_fd;
    const uint64_t off = sl.offset + sl.done;
    const bool aligned =
        !direct ||
        (off % f.align.offset_align == 0 && (sl.size - sl.done) % f.align.offset_align == 0 &&
         reinterpret_cast<uintptr_t>(sl.io_buf + sl.done) % f.align.mem_align == 0);
    if (aligned) {
      retry_.push_back(s);
      return;
    }
    Status st = BufferedIo(seg.op, f, sl.io_buf + sl.done, sl.size - sl.done, off);
    if (!st.ok()) {
      Fail(seg, st);
      Release(s);
      return;
    }
    sl.done = sl.size;
  }
  if (seg.op == IoOp::kRead && sl.io_buf != sl.user_buf) {
    std::memcpy(sl.user_buf, sl.io_buf, sl.size);
  }
  seg.completed += sl.size;
  if (options_.record_latency) latencies_ns_.push_back(SteadyNowNs() - sl.start_ns);
  Release(s);
}

void AioWorker::Fail(Segment& seg, const Status& s) {
  if (seg.status.ok()) seg.status = s;
}

void AioWorker::FinishSegments() {
  for (auto it = active_.begin(); it != active_.end();) {
    Segment& seg = *it;
    const bool finished =
        seg.inflight == 0 &&
        (!seg.status.ok() || (seg.issued == seg.size && seg.completed == seg.size));
    if (!finished) {
      ++it;
      continue;
    }
    if (trace_.tracer != nullptr) {
      AddToTraceBatch(seg);
      // The last segment: the span is recorded before its waiter wakes (and may end the run).
      if (active_.size() == 1) EndTraceBatch();
    }
    seg.request->SegmentDone(seg.status, seg.status.ok() ? seg.size : 0);
    seg = Segment();  // drops the request and file references
    auto next = std::next(it);
    finished_.splice(finished_.end(), active_, it);
    it = next;
  }
  if (!finished_.empty()) {
    std::lock_guard lock(mu_);
    spare_.splice(spare_.end(), finished_);
  }
}

}  // namespace strata::internal
