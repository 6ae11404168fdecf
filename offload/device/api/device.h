// Device: the accelerator interface the engine is written against once — device memory, in-order
// streams, events, async copies and a small kernel set — with CUDA's semantics.
//
// Backends are `final` classes made by CreateDevice() (offload/device/registry.h): HostDevice
// (always built; emulates a GPU with a capped arena, worker-thread streams and a throttled link)
// and CudaDevice (built with CUDA). Optional capabilities are advertised in DeviceCaps so callers
// can pick a generic path (e.g. no host registration needed on HostDevice).
//
// Thread safety: every method may be called concurrently from any thread unless it says
// otherwise. Ownership: the Device owns all device memory, streams and event state it hands out;
// it must outlive every Stream, Event and pointer obtained from it. A handle of another device (or
// an empty one) is InvalidArgument; a backend looks ids up in its own tables, never casts them to
// pointers, so an id it did not hand out is InvalidArgument too, and a destroyed stream is
// FailedPrecondition.
//
// Note [Stream errors]
// Enqueue calls (CopyAsync, LaunchHostFunc, LaunchKernel, EventRecord, StreamWaitEvent,
// FreeAsync) validate their arguments and return InvalidArgument/FailedPrecondition at once; the
// work itself runs later. If the work fails (a host task returns an error, a CUDA launch fails),
// the failure is kept as the stream's error and:
//   - StreamSynchronize / StreamQuery on that stream return it, every time (sticky);
//   - every event recorded on that stream after the failed op returns it from
//     EventSynchronize / EventQuery;
//   - a stream that waits on such an event fails with it too (the error follows the dependency);
//   - on HostDevice, later work on the failed stream is skipped (its inputs may be garbage).
// Destroy the stream and make a new one to continue. Errors are never thrown and never dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "offload/device/api/host_task.h"
#include "offload/device/api/kernel_launch.h"
#include "offload/device/api/stream.h"

namespace strata {

enum class DeviceKind : uint8_t { kHost, kCuda };

const char* DeviceKindName(DeviceKind kind);

struct DeviceCaps {
  // Host code may dereference device pointers directly (HostDevice: device memory is host RAM).
  bool host_accessible_memory = false;
  // RegisterHostMemory really pins memory for DMA (CUDA); otherwise it is a successful no-op.
  bool host_registration = false;
  // StreamOptions::priority is applied.
  bool stream_priorities = false;
  // Host<->device copies are paced to a configured link bandwidth (HostDevice emulation).
  bool throttled_link = false;
};

// Allocator statistics, in the spirit of c10's caching-allocator stats.
struct DeviceMemoryStats {
  uint64_t capacity_bytes = 0;
  uint64_t in_use_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t largest_free_block_bytes = 0;
  uint64_t alloc_count = 0;
  uint64_t free_count = 0;
  uint64_t oom_count = 0;
};

class Device {
 public:
  // Destroying a device waits for all its streams to finish their work.
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // E.g. "host (emulated, 1 GiB, link 25 GB/s)" or "cuda:0 (NVIDIA A100-SXM4-80GB)".
  virtual const std::string& name() const = 0;
  virtual const DeviceCaps& caps() const = 0;

  // --- Memory -----------------------------------------------------------------------------------
  // Allocates device memory (256-byte aligned), usable on any stream once this returns.
  // OutOfMemory naming tier "device" with the bytes asked, free and the largest free block.
  virtual Result<void*> Allocate(size_t size_bytes) = 0;
  // Frees memory from Allocate now. The caller guarantees no enqueued work still uses it
  // (synchronize first, or use FreeAsync). InvalidArgument for a pointer not from Allocate.
  virtual Status Free(void* ptr) = 0;
  // Frees `ptr` once `stream` reaches this point (stream-ordered, like cudaFreeAsync).
  virtual Status FreeAsync(const Stream& stream, void* ptr) = 0;
  virtual DeviceMemoryStats MemoryStats() const = 0;
  // Page-locks host memory for DMA (cudaHostRegister) if caps().host_registration; the caller
  // keeps ownership and must Unregister before freeing it. Failure returns an error, leaving the
  // memory usable as pageable memory.
  virtual Status RegisterHostMemory(void* ptr, size_t size_bytes) = 0;
  virtual Status UnregisterHostMemory(void* ptr) = 0;

  // --- Streams ----------------------------------------------------------------------------------
  virtual Result<Stream> CreateStream(const StreamOptions& options = {}) = 0;
  // Waits for the stream's work, then releases it; returns the stream's sticky error, if any.
  // Later use of the handle, including a second DestroyStream, returns FailedPrecondition. The
  // caller makes sure no other thread is still enqueueing on it.
  virtual Status DestroyStream(const Stream& stream) = 0;

  // Enqueues a copy; `kind` says which side of each pointer is device memory. Zero bytes is a
  // no-op. On HostDevice host<->device copies are paced to the link bandwidth.
  virtual Status CopyAsync(const Stream& stream, void* dst, const void* src, size_t size_bytes,
                           CopyKind kind) = 0;
  // Enqueues a host task; it runs after earlier work on the stream, and later work waits for
  // it. An error it returns becomes the stream's error (Note [Stream errors]). The task must not
  // synchronize its own stream (deadlock) and should not block for long. On HostDevice it runs
  // on the stream's worker thread and may use oneTBB inside.
  virtual Status LaunchHostFunc(const Stream& stream, HostTask task) = 0;
  // Enqueues one kernel (see kernels.h for the typed wrappers and their contracts).
  virtual Status LaunchKernel(const Stream& stream, const KernelLaunch& launch) = 0;
  virtual Status StreamWaitEvent(const Stream& stream, const Event& event) = 0;
  virtual Status StreamSynchronize(const Stream& stream) = 0;
  virtual Result<bool> StreamQuery(const Stream& stream) = 0;
  // Synchronizes every live stream; returns the first error found.
  virtual Status Synchronize() = 0;

  // --- Events -----------------------------------------------------------------------------------
  virtual Result<Event> CreateEvent(const EventOptions& options = {}) = 0;
  virtual Status EventRecord(const Event& event, const Stream& stream) = 0;
  virtual Result<bool> EventQuery(const Event& event) = 0;
  virtual Status EventSynchronize(const Event& event) = 0;
  // Time from `start` to `end` in ms. Both recorded with timing on and complete, else
  // FailedPrecondition (never recorded / timing disabled) or Unavailable (not yet complete).
  virtual Result<float> EventElapsedMs(const Event& start, const Event& end) = 0;

 protected:
  friend class Event;
  // The passkey that lets a backend mint Stream and Event handles (stream.h).
  static DeviceHandleKey HandleKey() { return DeviceHandleKey(); }
  // Called by ~Event. Never fails; safe while work recorded on the event is pending.
  virtual void DestroyEvent(uint64_t event_id) = 0;
};

}  // namespace strata
