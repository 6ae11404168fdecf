// Tracer: a Chrome trace of a run's spans (`strata.trace_path`) — JSON trace events that
// chrome://tracing and Perfetto open — so overlap of I/O, copies, collectives and compute is
// visible. Each span is a complete ("X") event with ts/dur in microseconds on a track: the
// calling thread's own (named with NameThisThread, e.g. "aio 0", "adam 1") or a named logical
// track (Track("stream compute")) for work that has no thread of its own (device streams).
// Spans on one track nest by time, as the viewer draws them.
//
//   Tracer tracer(config.strata.trace_path, rank);   // "" = disabled
//   { TraceSpan span(&tracer, "forward", "compute"); ... }
//   STRATA_RETURN_IF_ERROR(tracer.Flush());           // also written at destruction
//
// Cost: with a null or disabled tracer a TraceSpan is one branch and records nothing; nothing is
// written. Enabled, a span takes a mutex once (at its end) and allocates its event.
//
// Thread safety: every method may be called from any thread (the aio threads, the Adam workers,
// the engine's); Flush writes the events recorded so far (the file is rewritten each time).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata {

struct TraceArg {
  const char* key;  // a string literal (kept by pointer)
  double value;
};

class Tracer {
 public:
  // `path` "" makes a disabled tracer. `pid` is the process track (the rank), named "rank <pid>".
  explicit Tracer(std::string path, int pid = 0);
  // Writes the trace if events were recorded since the last Flush (an error is logged).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  const std::string& path() const { return path_; }

  // Microseconds since the tracer was made (the time base of every event).
  double NowUs() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
        .count();
  }

  // Names the calling thread's track (last name wins). No-op when disabled.
  void NameThisThread(std::string name);
  // The track id of a named logical track, made on first use (the same name, the same id).
  // Returns 0 when disabled.
  int Track(std::string_view name);
  // The calling thread's track id.
  static int ThisThreadTrack();

  // Records a complete event [begin_us, end_us) on `track` (ThisThreadTrack() for the caller's).
  void Complete(int track, std::string_view name, std::string_view category, double begin_us,
                double end_us, std::span<const TraceArg> args = {});
  void Complete(std::string_view name, std::string_view category, double begin_us, double end_us,
                std::span<const TraceArg> args = {}) {
    Complete(ThisThreadTrack(), name, category, begin_us, end_us, args);
  }

  size_t event_count() const;
  // Writes every event so far to path() (through a temporary file renamed into place; the
  // directory is made if missing). IoError naming the path. Disabled: Ok, nothing written.
  Status Flush();

 private:
  struct Event {
    std::string name, category;
    double ts_us = 0, dur_us = 0;
    int tid = 0;
    std::vector<std::pair<const char*, double>> args;
  };

  const bool enabled_;
  const std::string path_;
  const int pid_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::unordered_map<int, std::string> track_names_;  // tid -> name
  std::unordered_map<std::string, int> named_tracks_;
  size_t flushed_events_ = 0;
};

// Records one span on the calling thread's track (or `track`) from construction to
// destruction. With a null or disabled tracer: one branch, nothing recorded.
class TraceSpan {
 public:
  TraceSpan(Tracer* tracer, const char* name, const char* category = "")
      : tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr),
        name_(name),
        category_(category) {
    if (tracer_ != nullptr) begin_us_ = tracer_->NowUs();
  }
  TraceSpan(Tracer* tracer, int track, const char* name, const char* category = "")
      : TraceSpan(tracer, name, category) {
    track_ = track;
  }
  ~TraceSpan() { End(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  // Attaches a number shown with the span (bytes, sub-group); at most kMaxArgs are kept.
  void AddArg(const char* key, double value) {
    if (tracer_ != nullptr && num_args_ < kMaxArgs) args_[num_args_++] = {key, value};
  }
  // Ends the span now (idempotent).
  void End();

 private:
  static constexpr int kMaxArgs = 4;
  Tracer* tracer_;
  const char* name_;
  const char* category_;
  int track_ = -1;
  double begin_us_ = 0;
  TraceArg args_[kMaxArgs] = {};
  int num_args_ = 0;
};

}  // namespace strata
