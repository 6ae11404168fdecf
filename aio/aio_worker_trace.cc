// AioWorker's measures (aio/aio_worker.h): the read pieces in flight (Note [Reads in flight]), the
// piece latencies (record_latency) and the traced batch (Note [A traced batch]). The rest of the
// worker is in aio_worker.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "aio/aio_worker.h"
#include "core/clock.h"
#include "core/trace.h"

namespace strata::internal {

// Note [Reads in flight]
// How deep the read queue ran is the measure of whether a reader keeps the disk busy: a caller
// that issues one small read at a time and waits for it leaves queue_depth - 1 slots idle however
// fast the disk is. So the worker counts the read pieces holding a slot (issued, or waiting to be
// resubmitted) as they take and give back their slots: the most at once since the last
// TakeMaxReadsInFlight (AioHandle::TakeMaxReadsInFlight), and, when a batch is traced (Note [A
// traced batch]), the batch's most at once and their time-weighted mean. Off the trace that is
// two integer updates per piece; on it, one clock read more.
void AioWorker::CountRead(int delta) {
  if (trace_.tracer != nullptr) {  // the integral up to now, at the count before the change
    const int64_t now = SteadyNowNs();
    trace_.read_area +=
        static_cast<double>(reads_inflight_) * static_cast<double>(now - trace_.changed_ns);
    trace_.changed_ns = now;
  }
  reads_inflight_ += delta;
  max_reads_inflight_ = std::max(max_reads_inflight_, reads_inflight_);
  trace_.max_reads = std::max(trace_.max_reads, reads_inflight_);
}

int AioWorker::TakeMaxReadsInFlight() {
  int out = 0;
  RunOnWorker([&](IoEngine&) {
    out = max_reads_inflight_;
    max_reads_inflight_ = reads_inflight_;
    return Status::Ok();
  }).IgnoreError();
  return out;
}

std::vector<int64_t> AioWorker::TakeLatencies() {
  std::vector<int64_t> out;
  RunOnWorker([&](IoEngine&) {
    out.swap(latencies_ns_);
    return Status::Ok();
  }).IgnoreError();
  return out;
}

// Note [A traced batch]
// With a current tracer (core/trace.h), the worker records one span per batch on its own track
// ("aio worker <index>"): from taking segments while it had none to finishing the last one, so
// spans on the track never overlap (a segment arriving while others run joins their batch). The
// span says what moved: "aio read", "aio write" or "aio read+write", with bytes_read,
// bytes_written, segments, the file (the first segment's), and how deep the reads ran:
// max_reads_in_flight and mean_reads_in_flight (time-weighted over the span) against the
// configured queue_depth (Note [Reads in flight]). The tracer is loaded once, when a batch opens;
// tracing off costs that one relaxed load per batch.
void AioWorker::OpenTraceBatch() {
  if (trace_.tracer != nullptr) return;  // the open batch goes on
  Tracer* t = CurrentTracer();
  if (t == nullptr) return;
  t->NameThisThreadIfUnnamed("aio worker " + std::to_string(index_));
  trace_ = TraceBatch{};
  trace_.tracer = t;
  trace_.begin_us = t->NowUs();
  trace_.begin_ns = trace_.changed_ns = SteadyNowNs();
  trace_.max_reads = reads_inflight_;
}

void AioWorker::AddToTraceBatch(const Segment& seg) {
  (seg.op == IoOp::kRead ? trace_.read_bytes : trace_.write_bytes) += seg.size;
  ++trace_.segments;
  if (seg.file == nullptr) return;
  if (trace_.file.empty()) {
    trace_.file = seg.file->path;
  } else if (trace_.file != seg.file->path) {
    trace_.many_files = true;
  }
}

void AioWorker::EndTraceBatch() {
  Tracer* t = trace_.tracer;
  trace_.tracer = nullptr;
  const bool r = trace_.read_bytes != 0, w = trace_.write_bytes != 0;
  const char* name = r && w ? "aio read+write" : w ? "aio write" : "aio read";
  const int64_t now = SteadyNowNs();
  trace_.read_area +=
      static_cast<double>(reads_inflight_) * static_cast<double>(now - trace_.changed_ns);
  const double span_ns = static_cast<double>(now - trace_.begin_ns);
  const TraceArg args[] = {{"bytes_read", static_cast<double>(trace_.read_bytes)},
                           {"bytes_written", static_cast<double>(trace_.write_bytes)},
                           {"segments", static_cast<double>(trace_.segments)},
                           {"max_reads_in_flight", static_cast<double>(trace_.max_reads)},
                           {"mean_reads_in_flight", span_ns > 0 ? trace_.read_area / span_ns : 0.0},
                           {"queue_depth", static_cast<double>(slots_.size())}};
  if (trace_.many_files) trace_.file += " and others";
  t->Complete(Tracer::ThisThreadTrack(), name, "aio", trace_.begin_us, t->NowUs(), args, "file",
              trace_.file);
}

}  // namespace strata::internal
