#include "offload/device/host/host_device.h"

#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "offload/device/host/device_arena.h"
#include "offload/device/host/host_stream.h"
#include "offload/device/host/link_pacer.h"

namespace strata {
namespace {

using internal::DeviceArena;
using internal::EventSlot;
using internal::HostOp;
using internal::HostStream;
using internal::LinkPacer;

const char* CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return "H2D";
    case CopyKind::kDeviceToHost:
      return "D2H";
    case CopyKind::kDeviceToDevice:
      return "D2D";
    case CopyKind::kHostToHost:
      return "H2H";
  }
  return "?";
}

std::string FormatGbps(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g GB/s", gbps);
  return buf;
}

class HostDevice final : public Device {
 public:
  HostDevice(const HostDeviceOptions& options, std::unique_ptr<DeviceArena> arena)
      : options_(options),
        arena_(std::move(arena)),
        h2d_(options.link_bandwidth_gbps),
        d2h_(options.link_bandwidth_gbps),
        d2d_(options.device_bandwidth_gbps) {
    name_ = "host (emulated, " + FormatBytes(options.memory_bytes) + ", link " +
            (h2d_.throttled() ? FormatGbps(options.link_bandwidth_gbps) : "unthrottled") +
            (options.opaque_memory ? ", opaque memory)" : ")");
    caps_.host_accessible_memory = !options.opaque_memory;
    caps_.throttled_link = h2d_.throttled();
  }

  ~HostDevice() override {
    std::lock_guard lock(streams_mu_);
    for (auto& s : streams_) s.stream->Shutdown().IgnoreError();
  }

  DeviceKind kind() const override { return DeviceKind::kHost; }
  const std::string& name() const override { return name_; }
  const DeviceCaps& caps() const override { return caps_; }

  Result<void*> Allocate(size_t size_bytes) override { return arena_->Allocate(size_bytes); }
  Status Free(void* ptr) override { return arena_->Free(ptr); }
  Status FreeAsync(const Stream& stream, void* ptr) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "FreeAsync"));
    if (ptr == nullptr) return Status::Ok();
    if (!arena_->Contains(ptr, 1)) {
      return InvalidArgumentError("FreeAsync: pointer is not device memory");
    }
    HostOp op;
    op.type = HostOp::Type::kFree;
    op.dst = ptr;
    return s->Enqueue(std::move(op)).status();
  }
  DeviceMemoryStats MemoryStats() const override { return arena_->Stats(); }
  Status RegisterHostMemory(void*, size_t) override { return Status::Ok(); }
  Status UnregisterHostMemory(void*) override { return Status::Ok(); }

  Result<Stream> CreateStream(const StreamOptions& options) override {
    HostStream::Env env{&h2d_, &d2h_, &d2d_, arena_.get()};
    std::lock_guard lock(streams_mu_);
    const uint64_t id = streams_.size();  // the stream's index in streams_
    streams_.push_back(
        {std::make_unique<HostStream>(env, options_.queue_depth, id, options.priority), false});
    return Stream(HandleKey(), this, id);
  }

  Status DestroyStream(const Stream& stream) override {
    HostStream* s;
    {
      std::lock_guard lock(streams_mu_);
      STRATA_ASSIGN_OR_RETURN(StreamEntry * e, EntryOf(stream, "DestroyStream"));
      e->destroyed = true;  // from now on the handle is refused, so this runs once per stream
      s = e->stream.get();
    }
    // The HostStream object stays alive until the device dies: events recorded on it still find a
    // completed state instead of a dangling pointer.
    return s->Shutdown();
  }

  Status CopyAsync(const Stream& stream, void* dst, const void* src, size_t size_bytes,
                   CopyKind kind) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "CopyAsync"));
    if (size_bytes == 0) return Status::Ok();
    const bool dst_dev = kind == CopyKind::kHostToDevice || kind == CopyKind::kDeviceToDevice;
    const bool src_dev = kind == CopyKind::kDeviceToHost || kind == CopyKind::kDeviceToDevice;
    STRATA_RETURN_IF_ERROR(CheckSide(kind, "dst", dst, size_bytes, dst_dev));
    STRATA_RETURN_IF_ERROR(CheckSide(kind, "src", src, size_bytes, src_dev));
    HostOp op;
    op.type = HostOp::Type::kCopy;
    op.copy_kind = kind;
    op.dst = dst;
    op.src = src;
    op.size_bytes = size_bytes;
    return s->Enqueue(std::move(op)).status();
  }

  Status LaunchHostFunc(const Stream& stream, HostTask task) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "LaunchHostFunc"));
    if (!task) return InvalidArgumentError("LaunchHostFunc: empty task");
    HostOp op;
    op.type = HostOp::Type::kHostFunc;
    op.task = std::move(task);
    return s->Enqueue(std::move(op)).status();
  }

  Status LaunchKernel(const Stream& stream, const KernelLaunch& k) override;

  Status StreamWaitEvent(const Stream& stream, const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "StreamWaitEvent"));
    STRATA_ASSIGN_OR_RETURN(EventSlot * slot, SlotOf(event, "StreamWaitEvent"));
    auto [src, seq] = RecordedPoint(slot);
    if (src == nullptr || src == s) return Status::Ok();  // never recorded / same stream: ordered
    Result<bool> done = src->QueryUpTo(seq);
    if (done.ok() && *done) return Status::Ok();  // already complete and clean: nothing to wait
    HostOp op;
    op.type = HostOp::Type::kWait;
    op.wait_stream = src;
    op.wait_seq = seq;
    return s->Enqueue(std::move(op)).status();
  }

  Status StreamSynchronize(const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "StreamSynchronize"));
    return s->Synchronize();
  }

  Result<bool> StreamQuery(const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "StreamQuery"));
    return s->Query();
  }

  Status Synchronize() override {
    std::vector<HostStream*> all;
    {
      std::lock_guard lock(streams_mu_);
      for (auto& s : streams_) {
        if (!s.destroyed) all.push_back(s.stream.get());  // live streams only
      }
    }
    Status first;
    for (HostStream* s : all) {
      Status st = s->Synchronize();
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

  Result<Event> CreateEvent(const EventOptions& options) override {
    std::lock_guard lock(events_mu_);
    uint64_t id;
    if (!free_slots_.empty()) {
      id = free_slots_.back();
      free_slots_.pop_back();
    } else {
      id = slots_.size();
      slots_.emplace_back();
    }
    EventSlot& slot = slots_[id];
    slot.in_use = true;
    std::lock_guard slot_lock(slot.mu);
    slot.timing = options.timing;
    return Event(HandleKey(), this, id);
  }

  Status EventRecord(const Event& event, const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, "EventRecord"));
    STRATA_ASSIGN_OR_RETURN(EventSlot * slot, SlotOf(event, "EventRecord"));
    uint64_t generation;
    {
      std::lock_guard lock(slot->mu);
      generation = ++slot->generation;
      slot->time_valid = false;
    }
    HostOp op;  // the marker: when it runs, the recorded work is done
    op.type = HostOp::Type::kMarker;
    op.slot = slot;
    op.generation = generation;
    STRATA_ASSIGN_OR_RETURN(uint64_t seq, s->Enqueue(std::move(op)));
    std::lock_guard lock(slot->mu);
    if (slot->generation == generation) {
      slot->stream = s;
      slot->seq = seq;
    }
    return Status::Ok();
  }

  Result<bool> EventQuery(const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(EventSlot * slot, SlotOf(event, "EventQuery"));
    auto [src, seq] = RecordedPoint(slot);
    if (src == nullptr) return true;
    return src->QueryUpTo(seq);
  }

  Status EventSynchronize(const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(EventSlot * slot, SlotOf(event, "EventSynchronize"));
    auto [src, seq] = RecordedPoint(slot);
    if (src == nullptr) return Status::Ok();
    return src->WaitFor(seq);
  }

  Result<float> EventElapsedMs(const Event& start, const Event& end) override {
    STRATA_ASSIGN_OR_RETURN(internal::Clock::time_point t0, CompletedTime(start));
    STRATA_ASSIGN_OR_RETURN(internal::Clock::time_point t1, CompletedTime(end));
    return std::chrono::duration<float, std::milli>(t1 - t0).count();
  }

 protected:
  void DestroyEvent(uint64_t event_id) override {
    std::lock_guard lock(events_mu_);
    // Only live Event handles call this, each once; anything else is ignored (never fails).
    if (event_id >= slots_.size() || !slots_[event_id].in_use) return;
    EventSlot& slot = slots_[event_id];
    {
      std::lock_guard slot_lock(slot.mu);
      ++slot.generation;  // a marker still in flight will not write into the reused slot
      slot.stream = nullptr;
      slot.seq = 0;
      slot.time_valid = false;
    }
    slot.in_use = false;
    free_slots_.push_back(event_id);
  }

 private:
  struct StreamEntry {
    std::unique_ptr<HostStream> stream;
    bool destroyed = false;
  };

  // The entry of a live stream of this device. Requires streams_mu_.
  Result<StreamEntry*> EntryOf(const Stream& stream, const char* what) {
    if (stream.device() != this) {
      return InvalidArgumentError(std::string(what) + ": stream is empty or of another device");
    }
    if (stream.id() >= streams_.size()) {
      return InvalidArgumentError(std::string(what) + ": stream id " + std::to_string(stream.id()) +
                                  " was not made by " + name_ + " (it has made " +
                                  std::to_string(streams_.size()) + ")");
    }
    StreamEntry& e = streams_[stream.id()];
    if (e.destroyed) {
      return FailedPreconditionError(std::string(what) + ": stream " + std::to_string(stream.id()) +
                                     " was destroyed (DestroyStream); create a new one");
    }
    return &e;
  }

  // The HostStream stays alive until the device dies, so the pointer outlives the lock.
  Result<HostStream*> StreamOf(const Stream& stream, const char* what) {
    std::lock_guard lock(streams_mu_);
    STRATA_ASSIGN_OR_RETURN(StreamEntry * e, EntryOf(stream, what));
    return e->stream.get();
  }

  // Slots live until the device dies (a std::deque keeps their addresses).
  Result<EventSlot*> SlotOf(const Event& event, const char* what) {
    if (event.device() != this) {
      return InvalidArgumentError(std::string(what) + ": event is empty or of another device");
    }
    std::lock_guard lock(events_mu_);
    if (event.id() >= slots_.size() || !slots_[event.id()].in_use) {
      return InvalidArgumentError(std::string(what) + ": event id " + std::to_string(event.id()) +
                                  " is not a live event of " + name_);
    }
    return &slots_[event.id()];
  }

  static std::pair<HostStream*, uint64_t> RecordedPoint(EventSlot* slot) {
    std::lock_guard lock(slot->mu);
    return {slot->stream, slot->seq};
  }

  Result<internal::Clock::time_point> CompletedTime(const Event& event) {
    STRATA_ASSIGN_OR_RETURN(EventSlot * slot, SlotOf(event, "EventElapsedMs"));
    auto [src, seq] = RecordedPoint(slot);
    {
      std::lock_guard lock(slot->mu);
      if (!slot->timing) return FailedPreconditionError("EventElapsedMs: event has timing off");
    }
    if (src == nullptr) return FailedPreconditionError("EventElapsedMs: event never recorded");
    STRATA_ASSIGN_OR_RETURN(bool done, src->QueryUpTo(seq));
    std::lock_guard lock(slot->mu);
    if (!done || !slot->time_valid) {
      return UnavailableError("EventElapsedMs: event not complete yet");
    }
    return slot->time;
  }

  Status CheckSide(CopyKind kind, const char* side, const void* p, size_t n, bool device) const {
    if (p == nullptr) {
      return InvalidArgumentError(std::string(CopyKindName(kind)) + " copy: " + side + " is null");
    }
    if (arena_->Contains(p, n) != device) {
      return InvalidArgumentError(std::string(CopyKindName(kind)) + " copy of " +
                                  std::to_string(n) + " B: " + side + " is " +
                                  (device ? "not device memory" : "device memory"));
    }
    return Status::Ok();
  }

  const HostDeviceOptions options_;
  std::string name_;
  DeviceCaps caps_;
  std::unique_ptr<DeviceArena> arena_;
  LinkPacer h2d_, d2h_, d2d_;

  std::mutex streams_mu_;
  std::vector<StreamEntry> streams_;  // indexed by stream id; never shrinks

  std::mutex events_mu_;
  std::deque<EventSlot> slots_;       // indexed by event id; stable addresses
  std::vector<uint64_t> free_slots_;  // ids of released slots
};

Status HostDevice::LaunchKernel(const Stream& stream, const KernelLaunch& k) {
  STRATA_ASSIGN_OR_RETURN(HostStream * s, StreamOf(stream, KernelOpName(k.op)));
  auto in_arena = [&](const void* p, size_t bytes, const char* what) -> Status {
    if (arena_->Contains(p, bytes)) return Status::Ok();
    return InvalidArgumentError(std::string(KernelOpName(k.op)) + ": " + what + " (" +
                                std::to_string(bytes) + " B) is not device memory");
  };
  switch (k.op) {
    case KernelOp::kAdd:
      STRATA_RETURN_IF_ERROR(in_arena(k.src2, k.numel * DTypeBytes(k.src2_dtype), "b"));
      [[fallthrough]];
    case KernelOp::kCast:
    case KernelOp::kScale:
      STRATA_RETURN_IF_ERROR(in_arena(k.src, k.numel * DTypeBytes(k.src_dtype), "src"));
      [[fallthrough]];
    case KernelOp::kFill:
      STRATA_RETURN_IF_ERROR(in_arena(k.dst, k.numel * DTypeBytes(k.dst_dtype), "dst"));
      break;
    case KernelOp::kCheckFinite:
      STRATA_RETURN_IF_ERROR(in_arena(k.src, k.numel * DTypeBytes(k.src_dtype), "src"));
      STRATA_RETURN_IF_ERROR(in_arena(k.flag, sizeof(uint32_t), "flag"));
      break;
    case KernelOp::kL2NormPartials:
      if (k.numel) {
        STRATA_RETURN_IF_ERROR(in_arena(k.src, k.numel * DTypeBytes(k.src_dtype), "src"));
      }
      STRATA_RETURN_IF_ERROR(in_arena(k.partials, k.num_partials * sizeof(float), "partials"));
      break;
  }
  HostOp op;
  op.type = HostOp::Type::kKernel;
  op.kernel = k;
  return s->Enqueue(std::move(op)).status();
}

}  // namespace

Result<std::unique_ptr<Device>> CreateHostDevice(const HostDeviceOptions& options) {
  if (options.memory_bytes == 0) {
    return InvalidArgumentError("host device: memory_bytes must be > 0");
  }
  if (options.link_bandwidth_gbps < 0 || options.device_bandwidth_gbps < 0) {
    return InvalidArgumentError("host device: bandwidths must be >= 0 (0 = unthrottled)");
  }
  DeviceArena::Options arena_opts;
  arena_opts.capacity_bytes = options.memory_bytes;
  arena_opts.populate = options.populate_memory;
  arena_opts.lock = options.lock_memory;
  STRATA_ASSIGN_OR_RETURN(auto arena, DeviceArena::Create(arena_opts));
  return std::unique_ptr<Device>(new HostDevice(options, std::move(arena)));
}

}  // namespace strata
