// CountingDevice: a Device that forwards everything to another one and counts the host<->device
// and device<->device copies enqueued through it (calls and bytes per CopyKind). With timing on,
// it also measures how long each copy occupied its stream, by putting a host task before and
// after it (streams are in order and run their tasks on one worker thread, so the pair brackets
// the copy, including the link pacing of HostDevice). This is how zero_step splits "copies" out
// of the engine's step without touching the engine.
//
// Streams and events it hands out are its own handles carrying the target's ids; it translates
// them back on every call. Thread safety: as Device (any method from any thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "offload/device/api/device.h"

namespace strata::bench {

struct CopyCounts {
  static constexpr size_t kKinds = 4;  // CopyKind values
  std::array<int64_t, kKinds> calls{};
  std::array<int64_t, kKinds> bytes{};
  std::array<double, kKinds> busy_s{};  // 0 when timing is off
};

class CountingDevice final : public Device {
 public:
  // `target` must outlive this device; it is not owned.
  CountingDevice(Device* target, bool time_copies) : target_(target), time_copies_(time_copies) {}
  ~CountingDevice() override;

  CopyCounts counts() const;
  void ResetCounts();

  DeviceKind kind() const override { return target_->kind(); }
  const std::string& name() const override { return target_->name(); }
  const DeviceCaps& caps() const override { return target_->caps(); }
  Result<void*> Allocate(size_t size_bytes) override { return target_->Allocate(size_bytes); }
  Status Free(void* ptr) override { return target_->Free(ptr); }
  Status FreeAsync(const Stream& stream, void* ptr) override {
    return target_->FreeAsync(Inner(stream), ptr);
  }
  DeviceMemoryStats MemoryStats() const override { return target_->MemoryStats(); }
  Status RegisterHostMemory(void* ptr, size_t size_bytes) override {
    return target_->RegisterHostMemory(ptr, size_bytes);
  }
  Status UnregisterHostMemory(void* ptr) override { return target_->UnregisterHostMemory(ptr); }

  Result<Stream> CreateStream(const StreamOptions& options = {}) override;
  Status DestroyStream(const Stream& stream) override {
    return target_->DestroyStream(Inner(stream));
  }
  Status CopyAsync(const Stream& stream, void* dst, const void* src, size_t size_bytes,
                   CopyKind kind) override;
  Status LaunchHostFunc(const Stream& stream, HostTask task) override {
    return target_->LaunchHostFunc(Inner(stream), std::move(task));
  }
  Status LaunchKernel(const Stream& stream, const KernelLaunch& launch) override {
    return target_->LaunchKernel(Inner(stream), launch);
  }
  Status StreamWaitEvent(const Stream& stream, const Event& event) override;
  Status StreamSynchronize(const Stream& stream) override {
    return target_->StreamSynchronize(Inner(stream));
  }
  Result<bool> StreamQuery(const Stream& stream) override {
    return target_->StreamQuery(Inner(stream));
  }
  Status Synchronize() override { return target_->Synchronize(); }

  Result<Event> CreateEvent(const EventOptions& options = {}) override;
  Status EventRecord(const Event& event, const Stream& stream) override;
  Result<bool> EventQuery(const Event& event) override;
  Status EventSynchronize(const Event& event) override;
  Result<float> EventElapsedMs(const Event& start, const Event& end) override;

 protected:
  void DestroyEvent(uint64_t event_id) override;

 private:
  // A handle of another device passes through unchanged, so the target reports it as foreign.
  Stream Inner(const Stream& s) const {
    return s.device() == this ? Stream(HandleKey(), target_, s.id()) : s;
  }
  // The target's event behind one of ours, or null (not ours / destroyed).
  const Event* InnerEvent(const Event& e) const;

  Device* target_;
  const bool time_copies_;
  std::array<std::atomic<int64_t>, CopyCounts::kKinds> calls_{};
  std::array<std::atomic<int64_t>, CopyCounts::kKinds> bytes_{};
  std::array<std::atomic<int64_t>, CopyCounts::kKinds> busy_ns_{};
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Event> events_;  // our id -> the target's event
  uint64_t next_event_id_ = 1;
};

}  // namespace strata::bench
