#include "core/trace.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/log.h"

namespace strata {
namespace {

// Thread tracks are small process-wide numbers (1, 2, ...); named logical tracks start here so
// the two never collide.
constexpr int kFirstNamedTrack = 1 << 20;

std::atomic<int> next_thread_track{1};
std::atomic<uint64_t> next_tracer_id{1};

}  // namespace

void SetCurrentTracer(Tracer* tracer) {
  if (tracer != nullptr && !tracer->enabled()) tracer = nullptr;
  internal::g_current_tracer.store(tracer, std::memory_order_release);
}

Tracer::Tracer(std::string path, int pid)
    : enabled_(!path.empty()),
      path_(std::move(path)),
      pid_(pid),
      id_(next_tracer_id.fetch_add(1, std::memory_order_relaxed)),
      start_(std::chrono::steady_clock::now()) {}

Tracer::~Tracer() {
  Tracer* self = this;
  internal::g_current_tracer.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  if (!enabled_) return;
  bool pending;
  {
    std::lock_guard lock(mu_);
    pending = events_.size() != flushed_events_ || flushed_events_ == 0;
  }
  if (!pending) return;
  Status s = Flush();
  if (!s.ok()) LogWarning("trace: " + s.ToString());
}

int Tracer::ThisThreadTrack() {
  thread_local const int track = next_thread_track.fetch_add(1, std::memory_order_relaxed);
  return track;
}

void Tracer::NameThisThread(std::string name) {
  if (!enabled_) return;
  const int tid = ThisThreadTrack();
  std::lock_guard lock(mu_);
  track_names_[tid] = std::move(name);
}

void Tracer::NameThisThreadIfUnnamed(std::string_view name) {
  if (!enabled_) return;
  const int tid = ThisThreadTrack();
  std::lock_guard lock(mu_);
  track_names_.try_emplace(tid, name);
}

int Tracer::Track(std::string_view name) {
  if (!enabled_) return 0;
  std::lock_guard lock(mu_);
  auto it = named_tracks_.find(std::string(name));
  if (it != named_tracks_.end()) return it->second;
  const int id = kFirstNamedTrack + static_cast<int>(named_tracks_.size());
  named_tracks_.emplace(std::string(name), id);
  track_names_[id] = std::string(name);
  return id;
}

void Tracer::Complete(int track, std::string_view name, std::string_view category, double begin_us,
                      double end_us, std::span<const TraceArg> args, const char* text_key,
                      std::string_view text) {
  if (!enabled_) return;
  Event e;
  e.name = std::string(name);
  e.category = std::string(category);
  e.ts_us = begin_us;
  e.dur_us = end_us > begin_us ? end_us - begin_us : 0.0;
  e.tid = track;
  e.args.reserve(args.size());
  for (const TraceArg& a : args) e.args.emplace_back(a.key, a.value);
  if (text_key != nullptr) {
    e.text_key = text_key;
    e.text = std::string(text);
  }
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

size_t Tracer::event_count() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

Status Tracer::Flush() {
  if (!enabled_) return Status::Ok();
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard lock(mu_);
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid_},
                      {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(pid_)}}}});
    for (const auto& [tid, name] : track_names_) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid_},
                        {"tid", tid},
                        {"args", {{"name", name}}}});
    }
    for (const Event& e : events_) {
      nlohmann::json j = {{"ph", "X"},       {"name", e.name}, {"cat", e.category}, {"ts", e.ts_us},
                          {"dur", e.dur_us}, {"pid", pid_},    {"tid", e.tid}};
      if (!e.args.empty() || e.text_key != nullptr) {
        nlohmann::json a = nlohmann::json::object();
        for (const auto& [k, v] : e.args) a[k] = v;
        if (e.text_key != nullptr) a[e.text_key] = e.text;
        j["args"] = std::move(a);
      }
      events.push_back(std::move(j));
    }
    flushed_events_ = events_.size();
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};

  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path_);
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      return IoError("trace: cannot make the directory of strata.trace_path '" + path_ +
                     "': " + ec.message());
    }
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return IoError("trace: cannot open " + tmp + " for writing (strata.trace_path)");
    out << doc.dump();
    out.flush();
    if (!out) return IoError("trace: writing " + tmp + " failed (disk full?)");
  }
  fs::rename(tmp, target, ec);
  if (ec) return IoError("trace: rename " + tmp + " to " + path_ + ": " + ec.message());
  return Status::Ok();
}

void TraceSpan::End() {
  if (tracer_ == nullptr) return;
  const int track = track_ >= 0 ? track_ : Tracer::ThisThreadTrack();
  tracer_->Complete(track, name_, category_, begin_us_, tracer_->NowUs(),
                    std::span<const TraceArg>(args_, static_cast<size_t>(num_args_)));
  tracer_ = nullptr;
}

}  // namespace strata
