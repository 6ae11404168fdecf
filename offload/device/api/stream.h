// Stream and Event: small handle types for a Device's in-order work queues and their markers.
//
// A Stream is a copyable, non-owning handle {device, id}, like c10::Stream: the Device owns the
// queue, created by Device::CreateStream and released by Device::DestroyStream (or with the
// device). Work enqueued on one stream runs in order; work on different streams may overlap
// unless ordered with events. Every method forwards to the Device (see device.h for the full
// contract) and may be called from any thread.
//
// An Event is a move-only owning handle, like c10::Event / cudaEvent_t: Record() captures "all
// work enqueued on a stream so far"; Query()/Synchronize() ask whether that work is done;
// Stream::Wait() makes a stream's later work wait for it, without blocking the caller. An event
// that was never recorded counts as complete. Re-recording moves it to the new point; a wait
// already enqueued keeps waiting for the point recorded at the time of the Wait call.
//
// Only a backend mints handles (c10's `Stream(Unsafe, ...)`, as a passkey): the constructors take
// a DeviceHandleKey that only Device and its subclasses can make, so no caller invents a stream
// or event id. The id means something only to the device that made it; backends look it up in
// their own tables and refuse one they never handed out.
//
// Errors: enqueue calls return an error only for bad arguments or a destroyed stream; a failure
// of the work itself is reported, as a Status, by Synchronize/Query on the stream and on every
// event recorded after it (see Note [Stream errors] in device.h). Nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/status.h"
#include "offload/device/api/host_task.h"

namespace strata {

class Device;
class Event;

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

struct StreamOptions {
  // Lower is more urgent, as in CUDA (0 = default, -1 = high). HostDevice records but does not
  // apply it (one OS thread per stream).
  int priority = 0;
};

struct EventOptions {
  // Timing costs a timestamp per record; disable it for pure synchronisation events.
  bool timing = true;
};

// The passkey for the handle constructors below: only Device (for its backends, through
// Device::HandleKey()) can make one.
class DeviceHandleKey {
 private:
  friend class Device;
  DeviceHandleKey() = default;
};

class Stream {
 public:
  // An empty handle (valid() is false); every call on it is FailedPrecondition.
  Stream() = default;
  // For backends: `id` is the backend's own name for the queue.
  Stream(DeviceHandleKey, Device* device, uint64_t id) : device_(device), id_(id) {}

  Device* device() const { return device_; }
  uint64_t id() const { return id_; }
  bool valid() const { return device_ != nullptr; }
  friend bool operator==(const Stream& a, const Stream& b) = default;

  // Enqueues a copy of `size_bytes` from `src` to `dst`. Both buffers must stay valid until the
  // copy is done (synchronize or an event). See Device::CopyAsync.
  Status CopyAsync(void* dst, const void* src, size_t size_bytes, CopyKind kind) const;
  // Enqueues `task` to run on the stream's executor after all earlier work. See
  // Device::LaunchHostFunc.
  Status LaunchHostFunc(HostTask task) const;
  // Makes work enqueued on this stream after this call wait until `event` completes.
  Status Wait(const Event& event) const;
  // Blocks until all work enqueued so far is done; returns the stream's error if any.
  Status Synchronize() const;
  // true if all enqueued work is done, false if some is pending; the stream's error if failed.
  Result<bool> Query() const;

 private:
  Device* device_ = nullptr;
  uint64_t id_ = 0;
};

class Event {
 public:
  Event() = default;
  // For backends: the Event releases `id` through Device::DestroyEvent when it dies.
  Event(DeviceHandleKey, Device* device, uint64_t id) : device_(device), id_(id) {}
  Event(Event&& o) noexcept
      : device_(std::exchange(o.device_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Releases the event. Pending work it was recorded on, and waits on it, are unaffected.
  ~Event();

  Device* device() const { return device_; }
  uint64_t id() const { return id_; }
  bool valid() const { return device_ != nullptr; }

  // Captures the work enqueued on `stream` so far (same device).
  Status Record(const Stream& stream);
  // true if the recorded work is done (or never recorded); its error if that work failed.
  Result<bool> Query() const;
  // Blocks until the recorded work is done; its error if it failed.
  Status Synchronize() const;
  // Milliseconds between two completed, timing-enabled events.
  static Result<float> ElapsedMs(const Event& start, const Event& end);

 private:
  Device* device_ = nullptr;
  uint64_t id_ = 0;
};

}  // namespace strata
