// CudaDevice: Device on the CUDA runtime. Compiled only when CMake finds CUDA; not runnable on
// machines without a GPU (its tests skip). All cudaError_t values are translated in CudaStatus().
#include "offload/device/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/units.h"
#include "offload/device/api/memory_ledger.h"
#include "offload/device/cuda/cublas_library.h"
#include "offload/device/cuda/cuda_kernels.h"

namespace strata {
namespace {

// The one seam where CUDA errors become Status.
Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string msg = what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return OutOfMemoryError("out of memory on tier device: " + msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return InvalidArgumentError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return UnavailableError(msg);
    case cudaErrorHostMemoryAlreadyRegistered:
      return Status(StatusCode::kAlreadyExists, msg);
    default:
      return InternalError(msg);
  }
}

// Host-side state of one stream: host-task errors (CUDA cannot carry them) with the op number
// they happened at, so events recorded later report them (Note [Stream errors]).
struct CudaStreamState {
  cudaStream_t stream = nullptr;
  bool destroyed = false;        // guarded by CudaDevice::mu_; the cudaStream_t is gone
  std::atomic<uint64_t> ops{0};  // host tasks and event records, numbered
  std::mutex mu;
  Status error;
  uint64_t error_seq = 0;

  void Fail(uint64_t seq, const Status& s) {
    std::lock_guard lock(mu);
    if (error_seq == 0) {
      error = s;
      error_seq = seq;
    }
  }
  Status ErrorCovering(uint64_t seq) {
    std::lock_guard lock(mu);
    return error_seq != 0 && error_seq <= seq ? error : Status::Ok();
  }
};

struct CudaEventState {
  bool in_use = false;  // an Event handle holds it (guarded by CudaDevice::events_mu_)
  cudaEvent_t event = nullptr;
  bool timing = true;
  std::mutex mu;
  CudaStreamState* stream = nullptr;  // latest record
  uint64_t seq = 0;
};

struct HostTaskCall {
  HostTask task;
  CudaStreamState* state;
  uint64_t seq;
};

void CUDART_CB RunHostTask(void* arg) {
  auto* call = static_cast<HostTaskCall*>(arg);
  Status s = call->task();
  if (!s.ok()) call->state->Fail(call->seq, s.WithContext("host task"));
  delete call;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(const CudaDeviceOptions& options, std::string name, size_t capacity)
      : options_(options), name_(std::move(name)), memory_(capacity, name_) {
    caps_.host_registration = true;
    caps_.stream_priorities = true;
  }

  ~CudaDevice() override {
    Activate().IgnoreError();  // best effort: nothing to report to from a destructor
    cudaDeviceSynchronize();
    std::lock_guard lock(mu_);
    for (auto& s : streams_) {
      if (!s->destroyed) cudaStreamDestroy(s->stream);  // DestroyStream already released it
    }
    std::lock_guard events_lock(events_mu_);
    for (CudaEventState& ev : events_) {
      if (ev.in_use) cudaEventDestroy(ev.event);  // an Event outlived its device (a caller bug)
    }
    if (alloc_stream_ != nullptr) cudaStreamDestroy(alloc_stream_);
  }

  Status Init() {
    STRATA_RETURN_IF_ERROR(Activate());
    cudaMemPool_t pool;
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaDeviceGetDefaultMemPool(&pool, options_.ordinal), "default mem pool"));
    uint64_t keep = UINT64_MAX;  // cache freed memory in the pool instead of returning it
    STRATA_RETURN_IF_ERROR(CudaStatus(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "pool threshold"));
    return CudaStatus(cudaStreamCreateWithFlags(&alloc_stream_, cudaStreamNonBlocking),
                      "allocation stream");
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // CudaNativeStreamOf (cuda_device.h).
  Result<CudaNativeStream> NativeStream(const Stream& stream) {
    STRATA_RETURN_IF_ERROR(Activate());
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "CudaNativeStreamOf"));
    return CudaNativeStream{st->stream, options_.ordinal};
  }
  const std::string& name() const override { return name_; }
  const DeviceCaps& caps() const override { return caps_; }

  // Reserve against the cap first (under the ledger's lock), allocate without a lock, then commit
  // or roll back: concurrent callers can never both pass the check (MemoryLedger).
  Result<void*> Allocate(size_t size_bytes) override {
    STRATA_RETURN_IF_ERROR(Activate());
    STRATA_RETURN_IF_ERROR(memory_.Reserve(size_bytes));
    void* p = nullptr;
    Status s = CudaStatus(cudaMallocAsync(&p, size_bytes, alloc_stream_), "cudaMallocAsync");
    if (s.ok()) s = CudaStatus(cudaStreamSynchronize(alloc_stream_), "cudaMallocAsync sync");
    if (!s.ok()) {
      if (p != nullptr) cudaFreeAsync(p, alloc_stream_);  // the sync failed: do not leak it
      memory_.Rollback(size_bytes, s.code() == StatusCode::kOutOfMemory);
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return s.WithContext("asked " + FormatBytes(size_bytes) + ", free " + FormatBytes(free_b));
    }
    memory_.Commit(p, size_bytes);
    return p;
  }

  Status Free(void* ptr) override { return FreeOn(alloc_stream_, ptr, "Free"); }
  Status FreeAsync(const Stream& stream, void* ptr) override {
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "FreeAsync"));
    return FreeOn(st->stream, ptr, "FreeAsync");
  }

  DeviceMemoryStats MemoryStats() const override { return memory_.Stats(); }

  Status RegisterHostMemory(void* ptr, size_t size_bytes) override {
    STRATA_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaHostRegister(ptr, size_bytes, cudaHostRegisterPortable),
                      "cudaHostRegister " + FormatBytes(size_bytes));
  }
  Status UnregisterHostMemory(void* ptr) override {
    STRATA_RETURN_IF_ERROR(Activate());
    return CudaStatus(cudaHostUnregister(ptr), "cudaHostUnregister");
  }

  Result<Stream> CreateStream(const StreamOptions& options) override {
    STRATA_RETURN_IF_ERROR(Activate());
    int least = 0, greatest = 0;
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priority range"));
    const int priority = options.priority < greatest ? greatest
                         : options.priority > least  ? least
                                                     : options.priority;
    auto state = std::make_unique<CudaStreamState>();
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithPriority(&state->stream, cudaStreamNonBlocking, priority),
                   "cudaStreamCreateWithPriority"));
    std::lock_guard lock(mu_);
    const uint64_t id = streams_.size();  // the state's index in streams_
    streams_.push_back(std::move(state));
    return Stream(HandleKey(), this, id);
  }

  Status DestroyStream(const Stream& stream) override {
    CudaStreamState* st;
    {
      std::lock_guard lock(mu_);
      STRATA_ASSIGN_OR_RETURN(st, LockedStateOf(stream, "DestroyStream"));
      // Marked first, under the lock: a second DestroyStream (or any later use of the handle) is
      // refused, and the destructor skips it, so the cudaStream_t is destroyed exactly once.
      st->destroyed = true;
    }
    Status s = CudaStatus(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize");
    if (s.ok()) {
      std::lock_guard lock(st->mu);
      s = st->error;
    }
    // The state stays until the device dies (events may still point at it).
    Status d = CudaStatus(cudaStreamDestroy(st->stream), "cudaStreamDestroy");
    return s.ok() ? d : s;
  }

  Status CopyAsync(const Stream& stream, void* dst, const void* src, size_t size_bytes,
                   CopyKind kind) override {
    if (size_bytes == 0) return Status::Ok();
    STRATA_RETURN_IF_ERROR(Activate());
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "CopyAsync"));
    cudaMemcpyKind k = kind == CopyKind::kHostToDevice     ? cudaMemcpyHostToDevice
                       : kind == CopyKind::kDeviceToHost   ? cudaMemcpyDeviceToHost
                       : kind == CopyKind::kDeviceToDevice ? cudaMemcpyDeviceToDevice
                                                           : cudaMemcpyHostToHost;
    return CudaStatus(cudaMemcpyAsync(dst, src, size_bytes, k, st->stream),
                      "cudaMemcpyAsync " + FormatBytes(size_bytes));
  }

  Status LaunchHostFunc(const Stream& stream, HostTask task) override {
    if (!task) return InvalidArgumentError("LaunchHostFunc: empty task");
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "LaunchHostFunc"));
    auto* call = new HostTaskCall{std::move(task), st, st->ops.fetch_add(1) + 1};
    Status s = CudaStatus(cudaLaunchHostFunc(st->stream, &RunHostTask, call), "cudaLaunchHostFunc");
    if (!s.ok()) delete call;
    return s;
  }

  Status LaunchKernel(const Stream& stream, const KernelLaunch& launch) override {
    STRATA_RETURN_IF_ERROR(Activate());
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, KernelOpName(launch.op)));
    return CudaStatus(static_cast<cudaError_t>(internal::LaunchCudaKernel(launch, st->stream)),
                      std::string("kernel ") + KernelOpName(launch.op));
  }

  Status StreamWaitEvent(const Stream& stream, const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "StreamWaitEvent"));
    STRATA_ASSIGN_OR_RETURN(CudaEventState * ev, EventOf(event, "StreamWaitEvent"));
    {
      std::lock_guard lock(ev->mu);
      if (ev->stream == nullptr) return Status::Ok();  // never recorded: nothing to wait for
    }
    return CudaStatus(cudaStreamWaitEvent(st->stream, ev->event, 0), "cudaStreamWaitEvent");
  }

  Status StreamSynchronize(const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "StreamSynchronize"));
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize"));
    std::lock_guard lock(st->mu);
    return st->error;
  }

  Result<bool> StreamQuery(const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "StreamQuery"));
    {
      std::lock_guard lock(st->mu);
      if (!st->error.ok()) return st->error;
    }
    cudaError_t err = cudaStreamQuery(st->stream);
    if (err == cudaErrorNotReady) return false;
    STRATA_RETURN_IF_ERROR(CudaStatus(err, "cudaStreamQuery"));
    return true;
  }

  Status Synchronize() override {
    STRATA_RETURN_IF_ERROR(Activate());
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    std::lock_guard lock(mu_);
    for (auto& s : streams_) {
      if (s->destroyed) continue;  // live streams only
      std::lock_guard slock(s->mu);
      if (!s->error.ok()) return s->error;
    }
    return Status::Ok();
  }

  Result<Event> CreateEvent(const EventOptions& options) override {
    STRATA_RETURN_IF_ERROR(Activate());
    cudaEvent_t event = nullptr;
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(
                       &event, options.timing ? cudaEventDefault : cudaEventDisableTiming),
                   "cudaEventCreate"));
    std::lock_guard lock(events_mu_);
    uint64_t id;
    if (!free_events_.empty()) {
      id = free_events_.back();
      free_events_.pop_back();
    } else {
      id = events_.size();
      events_.emplace_back();
    }
    CudaEventState& ev = events_[id];
    ev.in_use = true;
    std::lock_guard ev_lock(ev.mu);
    ev.event = event;
    ev.timing = options.timing;
    ev.stream = nullptr;
    ev.seq = 0;
    return Event(HandleKey(), this, id);
  }

  Status EventRecord(const Event& event, const Stream& stream) override {
    STRATA_ASSIGN_OR_RETURN(CudaEventState * ev, EventOf(event, "EventRecord"));
    STRATA_ASSIGN_OR_RETURN(CudaStreamState * st, StateOf(stream, "EventRecord"));
    std::lock_guard lock(ev->mu);
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ev->event, st->stream), "cudaEventRecord"));
    ev->stream = st;
    ev->seq = st->ops.fetch_add(1) + 1;
    return Status::Ok();
  }

  Result<bool> EventQuery(const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(CudaEventState * ev, EventOf(event, "EventQuery"));
    cudaError_t err = cudaEventQuery(ev->event);
    if (err == cudaErrorNotReady) return false;
    STRATA_RETURN_IF_ERROR(CudaStatus(err, "cudaEventQuery"));
    STRATA_RETURN_IF_ERROR(RecordedError(ev));
    return true;
  }

  Status EventSynchronize(const Event& event) override {
    STRATA_ASSIGN_OR_RETURN(CudaEventState * ev, EventOf(event, "EventSynchronize"));
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(ev->event), "cudaEventSynchronize"));
    return RecordedError(ev);
  }

  Result<float> EventElapsedMs(const Event& start, const Event& end) override {
    STRATA_ASSIGN_OR_RETURN(CudaEventState * a, EventOf(start, "EventElapsedMs"));
    STRATA_ASSIGN_OR_RETURN(CudaEventState * b, EventOf(end, "EventElapsedMs"));
    if (!a->timing || !b->timing) {
      return FailedPreconditionError("EventElapsedMs: event has timing off");
    }
    float ms = 0;
    cudaError_t err = cudaEventElapsedTime(&ms, a->event, b->event);
    if (err == cudaErrorNotReady) return UnavailableError("EventElapsedMs: not complete yet");
    if (err == cudaErrorInvalidResourceHandle) {
      return FailedPreconditionError("EventElapsedMs: event never recorded");
    }
    STRATA_RETURN_IF_ERROR(CudaStatus(err, "cudaEventElapsedTime"));
    return ms;
  }

 protected:
  void DestroyEvent(uint64_t event_id) override {
    std::lock_guard lock(events_mu_);
    // Only live Event handles call this, each once; anything else is ignored (never fails).
    if (event_id >= events_.size() || !events_[event_id].in_use) return;
    CudaEventState& ev = events_[event_id];
    {
      std::lock_guard ev_lock(ev.mu);
      cudaEventDestroy(ev.event);  // CUDA releases it once pending work completes
      ev.event = nullptr;
      ev.stream = nullptr;
      ev.seq = 0;
    }
    ev.in_use = false;
    free_events_.push_back(event_id);
  }

 private:
  Status Activate() const { return CudaStatus(cudaSetDevice(options_.ordinal), "cudaSetDevice"); }

  // The state of a live stream of this device, looked up by id (never cast from it). Requires mu_.
  Result<CudaStreamState*> LockedStateOf(const Stream& stream, const char* what) {
    if (stream.device() != this) {
      return InvalidArgumentError(std::string(what) + ": stream is empty or of another device");
    }
    if (stream.id() >= streams_.size()) {
      return InvalidArgumentError(std::string(what) + ": stream id " + std::to_string(stream.id()) +
                                  " was not made by " + name_);
    }
    CudaStreamState* st = streams_[stream.id()].get();
    if (st->destroyed) {
      return FailedPreconditionError(std::string(what) + ": stream " + std::to_string(stream.id()) +
                                     " was destroyed (DestroyStream); create a new one");
    }
    return st;
  }
  // States live until the device dies, so the pointer outlives the lock.
  Result<CudaStreamState*> StateOf(const Stream& stream, const char* what) {
    std::lock_guard lock(mu_);
    return LockedStateOf(stream, what);
  }
  // Slots live until the device dies (a std::deque keeps their addresses).
  Result<CudaEventState*> EventOf(const Event& event, const char* what) {
    if (event.device() != this) {
      return InvalidArgumentError(std::string(what) + ": event is empty or of another device");
    }
    std::lock_guard lock(events_mu_);
    if (event.id() >= events_.size() || !events_[event.id()].in_use) {
      return InvalidArgumentError(std::string(what) + ": event id " + std::to_string(event.id()) +
                                  " is not a live event of " + name_);
    }
    return &events_[event.id()];
  }
  static Status RecordedError(CudaEventState* ev) {
    std::lock_guard lock(ev->mu);
    return ev->stream == nullptr ? Status::Ok() : ev->stream->ErrorCovering(ev->seq);
  }

  Status FreeOn(cudaStream_t stream, void* ptr, const char* what) {
    if (ptr == nullptr) return Status::Ok();
    STRATA_RETURN_IF_ERROR(Activate());
    // Take first: a concurrent second free of `ptr` is refused instead of freeing it twice.
    STRATA_ASSIGN_OR_RETURN(uint64_t bytes, memory_.Take(ptr, what));
    Status s = CudaStatus(cudaFreeAsync(ptr, stream), "cudaFreeAsync");
    if (!s.ok()) {
      memory_.Restore(ptr, bytes);
      return s;
    }
    memory_.Released(bytes);
    return Status::Ok();
  }

  const CudaDeviceOptions options_;
  const std::string name_;
  DeviceCaps caps_;
  cudaStream_t alloc_stream_ = nullptr;
  internal::MemoryLedger memory_;  // the cap, live allocations and statistics

  std::mutex mu_;
  std::vector<std::unique_ptr<CudaStreamState>> streams_;  // indexed by stream id; never shrinks

  std::mutex events_mu_;
  std::deque<CudaEventState> events_;  // indexed by event id; stable addresses
  std::vector<uint64_t> free_events_;  // ids of released slots
};

}  // namespace

Result<CudaNativeStream> CudaNativeStreamOf(const Stream& stream) {
  auto* device = dynamic_cast<CudaDevice*>(stream.device());
  if (device == nullptr) {
    return InvalidArgumentError("CudaNativeStreamOf: stream is empty or not of a CUDA device");
  }
  return device->NativeStream(stream);
}

Result<int> CudaDeviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return UnavailableError(std::string("no CUDA device: cudaGetDeviceCount: ") +
                            cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
  if (count == 0) return UnavailableError("no CUDA device: cudaGetDeviceCount returned 0");
  return count;
}

Result<std::unique_ptr<Device>> CreateCudaDevice(const CudaDeviceOptions& options) {
  STRATA_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (options.ordinal < 0 || options.ordinal >= count) {
    return UnavailableError("no CUDA device " + std::to_string(options.ordinal) + " (found " +
                            std::to_string(count) + ")");
  }
  // The CUDA nn ops need cuBLAS: load it now (Note [cuBLAS loaded on demand]), so a missing
  // library is said here, naming it, rather than at the first GEMM.
  if (Result<const internal::CublasApi*> blas = internal::LoadCublas(); !blas.ok()) {
    return blas.status().WithContext("cuda:" + std::to_string(options.ordinal));
  }
  cudaDeviceProp prop{};
  STRATA_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, options.ordinal), "cudaGetDeviceProperties"));
  size_t capacity = prop.totalGlobalMem;
  if (options.memory_limit_bytes != 0 && options.memory_limit_bytes < capacity) {
    capacity = options.memory_limit_bytes;
  }
  std::string name = "cuda:" + std::to_string(options.ordinal) + " (" + prop.name + ", " +
                     FormatBytes(capacity) + ")";
  auto device = std::make_unique<CudaDevice>(options, std::move(name), capacity);
  STRATA_RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace strata
