#include "bench/zero_step/counting_device.h"

#include <utility>

#include "core/clock.h"

namespace strata::bench {
namespace {

// Set by the task before a copy, read by the task after it, on the stream's worker thread.
int64_t& CopyStartNs() {
  static thread_local int64_t start_ns = 0;
  return start_ns;
}

Status NotOurs(const char* what) {
  return InvalidArgumentError(std::string("CountingDevice: ") + what +
                              ": an event this device did not create (or destroyed)");
}

}  // namespace

CountingDevice::~CountingDevice() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

CopyCounts CountingDevice::counts() const {
  CopyCounts c;
  for (size_t k = 0; k < CopyCounts::kKinds; ++k) {
    c.calls[k] = calls_[k].load();
    c.bytes[k] = bytes_[k].load();
    c.busy_s[k] = static_cast<double>(busy_ns_[k].load()) * 1e-9;
  }
  return c;
}

void CountingDevice::ResetCounts() {
  for (size_t k = 0; k < CopyCounts::kKinds; ++k) {
    calls_[k] = 0;
    bytes_[k] = 0;
    busy_ns_[k] = 0;
  }
}

Result<Stream> CountingDevice::CreateStream(const StreamOptions& options) {
  STRATA_ASSIGN_OR_RETURN(Stream s, target_->CreateStream(options));
  return Stream(HandleKey(), this, s.id());
}

Status CountingDevice::CopyAsync(const Stream& stream, void* dst, const void* src,
                                 size_t size_bytes, CopyKind kind) {
  const Stream inner = Inner(stream);
  const size_t k = static_cast<size_t>(kind);
  if (!time_copies_ || size_bytes == 0 || k >= CopyCounts::kKinds) {
    STRATA_RETURN_IF_ERROR(target_->CopyAsync(inner, dst, src, size_bytes, kind));
  } else {
    STRATA_RETURN_IF_ERROR(target_->LaunchHostFunc(inner, []() -> Status {
      CopyStartNs() = SteadyNowNs();
      return Status::Ok();
    }));
    STRATA_RETURN_IF_ERROR(target_->CopyAsync(inner, dst, src, size_bytes, kind));
    std::atomic<int64_t>* busy = &busy_ns_[k];
    STRATA_RETURN_IF_ERROR(target_->LaunchHostFunc(inner, [busy]() -> Status {
      busy->fetch_add(SteadyNowNs() - CopyStartNs());
      return Status::Ok();
    }));
  }
  if (k < CopyCounts::kKinds) {
    ++calls_[k];
    bytes_[k] += static_cast<int64_t>(size_bytes);
  }
  return Status::Ok();
}

Status CountingDevice::StreamWaitEvent(const Stream& stream, const Event& event) {
  const Event* e = InnerEvent(event);
  if (e == nullptr) return NotOurs("StreamWaitEvent");
  return target_->StreamWaitEvent(Inner(stream), *e);
}

Result<Event> CountingDevice::CreateEvent(const EventOptions& options) {
  STRATA_ASSIGN_OR_RETURN(Event inner, target_->CreateEvent(options));
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_event_id_++;
  events_.emplace(id, std::move(inner));
  return Event(HandleKey(), this, id);
}

const Event* CountingDevice::InnerEvent(const Event& e) const {
  if (e.device() != this) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(e.id());
  return it == events_.end() ? nullptr : &it->second;  // map nodes do not move
}

Status CountingDevice::EventRecord(const Event& event, const Stream& stream) {
  const Event* e = InnerEvent(event);
  if (e == nullptr) return NotOurs("EventRecord");
  return target_->EventRecord(*e, Inner(stream));
}

Result<bool> CountingDevice::EventQuery(const Event& event) {
  const Event* e = InnerEvent(event);
  if (e == nullptr) return NotOurs("EventQuery");
  return target_->EventQuery(*e);
}

Status CountingDevice::EventSynchronize(const Event& event) {
  const Event* e = InnerEvent(event);
  if (e == nullptr) return NotOurs("EventSynchronize");
  return target_->EventSynchronize(*e);
}

Result<float> CountingDevice::EventElapsedMs(const Event& start, const Event& end) {
  const Event* s = InnerEvent(start);
  const Event* e = InnerEvent(end);
  if (s == nullptr || e == nullptr) return NotOurs("EventElapsedMs");
  return target_->EventElapsedMs(*s, *e);
}

void CountingDevice::DestroyEvent(uint64_t event_id) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event_id);
}

}  // namespace strata::bench
