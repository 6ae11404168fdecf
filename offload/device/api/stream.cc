#include "offload/device/api/stream.h"

#include "offload/device/api/device.h"

namespace strata {
namespace {
Status NullHandle(const char* what) {
  return FailedPreconditionError(std::string(what) + " on an empty handle");
}
}  // namespace

Status Stream::CopyAsync(void* dst, const void* src, size_t size_bytes, CopyKind kind) const {
  if (device_ == nullptr) return NullHandle("Stream::CopyAsync");
  return device_->CopyAsync(*this, dst, src, size_bytes, kind);
}

Status Stream::LaunchHostFunc(HostTask task) const {
  if (device_ == nullptr) return NullHandle("Stream::LaunchHostFunc");
  return device_->LaunchHostFunc(*this, std::move(task));
}

Status Stream::Wait(const Event& event) const {
  if (device_ == nullptr) return NullHandle("Stream::Wait");
  return device_->StreamWaitEvent(*this, event);
}

Status Stream::Synchronize() const {
  if (device_ == nullptr) return NullHandle("Stream::Synchronize");
  return device_->StreamSynchronize(*this);
}

Result<bool> Stream::Query() const {
  if (device_ == nullptr) return NullHandle("Stream::Query");
  return device_->StreamQuery(*this);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (device_ != nullptr) device_->DestroyEvent(id_);
    device_ = std::exchange(o.device_, nullptr);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

Event::~Event() {
  if (device_ != nullptr) device_->DestroyEvent(id_);
}

Status Event::Record(const Stream& stream) {
  if (device_ == nullptr) return NullHandle("Event::Record");
  if (stream.device() != device_) {
    return InvalidArgumentError("Event::Record: stream belongs to another device");
  }
  return device_->EventRecord(*this, stream);
}

Result<bool> Event::Query() const {
  if (device_ == nullptr) return NullHandle("Event::Query");
  return device_->EventQuery(*this);
}

Status Event::Synchronize() const {
  if (device_ == nullptr) return NullHandle("Event::Synchronize");
  return device_->EventSynchronize(*this);
}

Result<float> Event::ElapsedMs(const Event& start, const Event& end) {
  if (start.device_ == nullptr || end.device_ == nullptr) return NullHandle("Event::ElapsedMs");
  if (start.device_ != end.device_) {
    return InvalidArgumentError("Event::ElapsedMs: events belong to different devices");
  }
  return start.device_->EventElapsedMs(start, end);
}

}  // namespace strata
