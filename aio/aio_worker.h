// Private to aio/: one AioHandle thread. It owns an IoEngine and a bounce buffer, takes segments
// from its queue, cuts them into block_size pieces and keeps up to queue_depth in flight.
// Segments travel in list nodes that are recycled (spliced, never freed), so a request in the
// steady state allocates nothing here. A lasting reap error tears the engine down (Note [A broken
// engine] in aio_worker.cc): every waiter returns, later requests fail as Aborted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aio/aio_options.h"
#include "aio/aio_request.h"
#include "aio/direct/aligned_buffer.h"
#include "aio/engine/io_engine.h"

namespace strata {
class Tracer;
}  // namespace strata

namespace strata::internal {

class AioWorker {
 public:
  AioWorker(int index, std::unique_ptr<IoEngine> engine, AlignedBuffer bounce,
            const AioOptions& options);
  ~AioWorker();  // finishes queued work, then joins
  AioWorker(const AioWorker&) = delete;
  AioWorker& operator=(const AioWorker&) = delete;

  // Any thread. The segment's request is completed by this worker.
  void Enqueue(Segment segment);
  // Any thread: runs `fn` on the worker thread between I/Os and waits for it.
  Status RunOnWorker(std::function<Status(IoEngine&)> fn);

  // The engine's Describe(), taken at start (the engine may be torn down later).
  const std::string& description() const { return description_; }
  // Any thread: the piece latencies (ns) recorded since the last call (record_latency only).
  std::vector<int64_t> TakeLatencies();
  // Any thread: the most read pieces this worker had in flight at once since the last call
  // (Note [Reads in flight] in aio_worker_trace.cc).
  int TakeMaxReadsInFlight();

 private:
  struct Slot {
    Segment* seg = nullptr;
    uint8_t* user_buf = nullptr;  // where the piece's bytes belong in the caller's buffer
    uint8_t* io_buf = nullptr;    // what the engine reads/writes (user_buf or bounce)
    uint64_t offset = 0;
    uint32_t size = 0;
    uint32_t done = 0;
    int64_t start_ns = 0;
  };
  struct Control {
    std::function<Status(IoEngine&)> fn;
    Status* result;
    bool* done;
  };

  void Run();
  void RunControls(std::deque<Control>& controls);
  void DoBuffered(Segment& seg);
  void IssuePieces();           // reads first (Note [Reads first] in aio_worker.cc)
  void IssuePiecesOf(IoOp op);  // the pieces of queued requests of one kind
  void SubmitRetries();
  void SubmitBatch();
  void Release(int slot);
  // A read piece took (+1) or gave back (-1) its slot (Note [Reads in flight]).
  void CountRead(int delta);
  uint8_t* BounceFor(int slot);
  void Complete(const IoCompletion& c);
  void Fail(Segment& seg, const Status& s);
  void FinishSegments();
  void OnReapError(const Status& error);
  void TearDown(const Status& cause);
  IoRequest MakeRequest(int slot) const;
  // Trace spans (Note [A traced batch] in aio_worker_trace.cc); nothing when CurrentTracer() is
  // null.
  void OpenTraceBatch();
  void AddToTraceBatch(const Segment& seg);
  void EndTraceBatch();

  const int index_;
  const AioOptions options_;
  std::unique_ptr<IoEngine> engine_;  // null once torn down (broken_ says why)
  const std::string description_;
  AlignedBuffer bounce_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable control_cv_;
  std::list<Segment> queue_;
  std::list<Segment> spare_;  // recycled nodes for Enqueue
  std::deque<Control> controls_;
  bool stop_ = false;

  // Worker-thread state only.
  std::list<Segment> active_;
  std::list<Segment> finished_;  // emptied nodes, returned to spare_ in one splice
  int reap_failures_ = 0;        // consecutive
  Status broken_;                // the engine was torn down: why
  std::vector<Slot> slots_;
  std::vector<int> free_slots_;
  std::vector<IoRequest> batch_;
  std::vector<int> retry_;  // slots to resubmit (EAGAIN, short transfer, partial submit)
  std::vector<IoCompletion> completions_;
  int inflight_ = 0;
  int reads_inflight_ = 0;      // read pieces holding a slot (Note [Reads in flight])
  int max_reads_inflight_ = 0;  // since the last TakeMaxReadsInFlight
  size_t reads_in_a_row_ = 0;   // read pieces issued since the last write piece
  // Overlap mode: how long the next Reap may wait while there is room for more pieces (Note
  // [Waiting with room] in aio_worker.cc).
  int64_t room_wait_us_;
  std::vector<int64_t> latencies_ns_;
  struct TraceBatch {
    Tracer* tracer = nullptr;  // null: no batch open
    double begin_us = 0;
    uint64_t read_bytes = 0, write_bytes = 0;
    int segments = 0;
    // Read pieces in flight over the batch: the most at once, and their integral over time
    // (piece x ns) since begin_ns, for the time-weighted mean (Note [Reads in flight]).
    int max_reads = 0;
    double read_area = 0;
    int64_t begin_ns = 0, changed_ns = 0;
    std::string file;  // the first segment's path
    bool many_files = false;
  };
  TraceBatch trace_;

  std::thread thread_;
};

}  // namespace strata::internal
