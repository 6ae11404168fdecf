// Tracer: a Chrome trace of a run's spans (`strata.trace_path`) — JSON trace events that
// chrome://tracing and Perfetto open — so overlap of I/O, copies, collectives and compute is
// visible. Each span is a complete ("X") event with ts/dur in microseconds on a track: the
// calling thread's own (named with NameThisThread, e.g. "aio worker 0") or a named logical
// track (Track("stream compute"), Track("adam worker 1")) for work that has no thread of its own
// (device streams, the slots of a oneTBB arena).
//
//   Tracer tracer(config.strata.trace_path, rank);   // "" = disabled
//   { TraceSpan span(&tracer, "forward", "compute"); ... }
//   STRATA_RETURN_IF_ERROR(tracer.Flush());           // also written at destruction
//
// Lower layers (aio/, cpu_adam/) record into the process-wide CurrentTracer(), which the owner
// of a tracer (the engine, when strata.trace_path is set) installs with SetCurrentTracer; see
// Note [The current tracer] below.
//
// Cost: with a null or disabled tracer a TraceSpan is one branch and records nothing; nothing is
// written. CurrentTracer() is one relaxed atomic load. Enabled, a span takes a mutex once (at its
// end) and allocates its event.
//
// Thread safety: every method may be called from any thread (the aio threads, the Adam workers,
// the engine's); Flush writes the events recorded so far (the file is rewritten each time).
#pragma once

#include <atomic>
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
  // Uninstalls itself if it is CurrentTracer(), then writes the trace if events were recorded
  // since the last Flush (an error is logged).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  const std::string& path() const { return path_; }
  // Unique per tracer in this process (never reused, unlike an address).
  uint64_t id() const { return id_; }

  // Microseconds since the tracer was made (the time base of every event).
  double NowUs() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
        .count();
  }

  // Names the calling thread's track (last name wins). No-op when disabled.
  void NameThisThread(std::string name);
  // Names it only if it has no name yet in this tracer (first name wins).
  void NameThisThreadIfUnnamed(std::string_view name);
  // The track id of a named logical track, made on first use (the same name, the same id).
  // Returns 0 when disabled.
  int Track(std::string_view name);
  // The calling thread's track id.
  static int ThisThreadTrack();

  // Records a complete event [begin_us, end_us) on `track` (ThisThreadTrack() for the caller's).
  // `text_key`/`text` (optional, e.g. "file") add one string argument.
  void Complete(int track, std::string_view name, std::string_view category, double begin_us,
                double end_us, std::span<const TraceArg> args = {}, const char* text_key = nullptr,
                std::string_view text = {});
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
    const char* text_key = nullptr;
    std::string text;
  };

  const bool enabled_;
  const std::string path_;
  const int pid_;
  const uint64_t id_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::unordered_map<int, std::string> track_names_;  // tid -> name
  std::unordered_map<std::string, int> named_tracks_;
  size_t flushed_events_ = 0;
};

// Note [The current tracer]
// aio workers and the CPU optimizer's workers cannot be handed a tracer through the layers above
// them (lower layers never include engine/), so they read one process-wide pointer: null = off,
// and then a span costs one relaxed load and a branch. The engine installs its tracer when
// strata.trace_path is set; the tracer uninstalls itself at destruction (only if it is still the
// current one). Lifetime: a lower layer loads the pointer when a unit of work starts (an aio
// batch, an optimizer step) and records into it before that work is reported done, so a tracer
// must outlive the I/O and optimizer steps issued while it is current — true of the engine,
// which waits for its own requests. Several tracers in one process: the last installed wins, and
// it receives the spans of every aio handle and optimizer of the process.
namespace internal {
inline std::atomic<Tracer*> g_current_tracer{nullptr};
}  // namespace internal

inline Tracer* CurrentTracer() {
  return internal::g_current_tracer.load(std::memory_order_relaxed);
}
// Installs `tracer` (null, or a disabled tracer: uninstalls).
void SetCurrentTracer(Tracer* tracer);

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
