// CudaDevice: Device on the CUDA runtime. Compiled only when CMake finds CUDA; not runnable on
// machines without a GPU (its tests skip). All cudaError_t values are translated in CudaStatus().
#include "offload/device/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/log.h"
#include "core/units.h"
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
      : options_(options), name_(std::move(name)), capacity_(capacity) {
    caps_.host_registration = true;
    caps_.stream_priorities = true;
  }

  ~CudaDevice() override {
    Activate().IgnoreError();  // best effort: nothing to report to from a destructor
    cudaDeviceSynchronize();
    std::lock_guard lock(mu_);
    for (auto* s : streams_) {
      cudaStreamDestroy(s->stream);
      delete s;
    }
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
  const std::string& name() const override { return name_; }
  const DeviceCaps& caps() const override { return caps_; }

  Result<void*> Allocate(size_t size_bytes) override {
    STRATA_RETURN_IF_ERROR(Activate());
    {
      std::lock_guard lock(mu_);
      if (stats_.in_use_bytes + size_bytes > capacity_) {
        ++stats_.oom_count;
        return OutOfMemoryError("out of memory on tier device: asked " + FormatBytes(size_bytes) +
                                ", free " + FormatBytes(capacity_ - stats_.in_use_bytes) + " of " +
                                FormatBytes(capacity_) + " (" + name_ + ")");
      }
    }
    void* p = nullptr;
    Status s = CudaStatus(cudaMallocAsync(&p, size_bytes, alloc_stream_), "cudaMallocAsync");
    if (s.ok()) s = CudaStatus(cudaStreamSynchronize(alloc_stream_), "cudaMallocAsync sync");
    std::lock_guard lock(mu_);
    if (!s.ok()) {
      if (s.code() == StatusCode::kOutOfMemory) ++stats_.oom_count;
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return s.WithContext("asked " + FormatBytes(size_bytes) + ", free " + FormatBytes(free_b));
    }
    sizes_[p] = size_bytes;
    stats_.in_use_bytes += size_bytes;
    if (stats_.in_use_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.in_use_bytes;
    ++stats_.alloc_count;
    return p;
  }

  Status Free(void* ptr) override { return FreeOn(alloc_stream_, ptr, "Free"); }
  Status FreeAsync(const Stream& stream, void* ptr) override {
    return FreeOn(StateOf(stream)->stream, ptr, "FreeAsync");
  }

  DeviceMemoryStats MemoryStats() const override {
    std::lock_guard lock(mu_);
    DeviceMemoryStats s = stats_;
    s.capacity_bytes = capacity_;
    s.largest_free_block_bytes = capacity_ - s.in_use_bytes;  // pools hide fragmentation
    return s;
  }

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
    auto* state = new CudaStreamState();
    Status s =
        CudaStatus(cudaStreamCreateWithPriority(&state->stream, cudaStreamNonBlocking, priority),
                   "cudaStreamCreateWithPriority");
    if (!s.ok()) {
      delete state;
      return s;
    }
    std::lock_guard lock(mu_);
    streams_.push_back(state);
    return Stream(this, reinterpret_cast<uint64_t>(state));
  }

  Status DestroyStream(const Stream& stream) override {
    CudaStreamState* st = StateOf(stream);
    Status s = StreamSynchronize(stream);
    // The state stays until the device dies (events may still point at it).
    Status d = CudaStatus(cudaStreamDestroy(st->stream), "cudaStreamDestroy");
    return s.ok() ? d : s;
  }

  Status CopyAsync(const Stream& stream, void* dst, const void* src, size_t size_bytes,
                   CopyKind kind) override {
    if (size_bytes == 0) return Status::Ok();
    STRATA_RETURN_IF_ERROR(Activate());
    cudaMemcpyKind k = kind == CopyKind::kHostToDevice     ? cudaMemcpyHostToDevice
                       : kind == CopyKind::kDeviceToHost   ? cudaMemcpyDeviceToHost
                       : kind == CopyKind::kDeviceToDevice ? cudaMemcpyDeviceToDevice
                                                           : cudaMemcpyHostToHost;
    return CudaStatus(cudaMemcpyAsync(dst, src, size_bytes, k, StateOf(stream)->stream),
                      "cudaMemcpyAsync " + FormatBytes(size_bytes));
  }

  Status LaunchHostFunc(const Stream& stream, HostTask task) override {
    if (!task) return InvalidArgumentError("LaunchHostFunc: empty task");
    CudaStreamState* st = StateOf(stream);
    auto* call = new HostTaskCall{std::move(task), st, st->ops.fetch_add(1) + 1};
    Status s = CudaStatus(cudaLaunchHostFunc(st->stream, &RunHostTask, call), "cudaLaunchHostFunc");
    if (!s.ok()) delete call;
    return s;
  }

  Status LaunchKernel(const Stream& stream, const KernelLaunch& launch) override {
    STRATA_RETURN_IF_ERROR(Activate());
    return CudaStatus(
        static_cast<cudaError_t>(internal::LaunchCudaKernel(launch, StateOf(stream)->stream)),
        std::string("kernel ") + KernelOpName(launch.op));
  }

  Status StreamWaitEvent(const Stream& stream, const Event& event) override {
    CudaEventState* ev = EventOf(event);
    {
      std::lock_guard lock(ev->mu);
      if (ev->stream == nullptr) return Status::Ok();  // never recorded: nothing to wait for
    }
    return CudaStatus(cudaStreamWaitEvent(StateOf(stream)->stream, ev->event, 0),
                      "cudaStreamWaitEvent");
  }

  Status StreamSynchronize(const Stream& stream) override {
    CudaStreamState* st = StateOf(stream);
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(st->stream), "cudaStreamSynchronize"));
    std::lock_guard lock(st->mu);
    return st->error;
  }

  Result<bool> StreamQuery(const Stream& stream) override {
    CudaStreamState* st = StateOf(stream);
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
    for (auto* s : streams_) {
      std::lock_guard slock(s->mu);
      if (!s->error.ok()) return s->error;
    }
    return Status::Ok();
  }

  Result<Event> CreateEvent(const EventOptions& options) override {
    STRATA_RETURN_IF_ERROR(Activate());
    auto* ev = new CudaEventState();
    ev->timing = options.timing;
    Status s =
        CudaStatus(cudaEventCreateWithFlags(
                       &ev->event, options.timing ? cudaEventDefault : cudaEventDisableTiming),
                   "cudaEventCreate");
    if (!s.ok()) {
      delete ev;
      return s;
    }
    return Event(this, reinterpret_cast<uint64_t>(ev));
  }

  Status EventRecord(const Event& event, const Stream& stream) override {
    CudaEventState* ev = EventOf(event);
    CudaStreamState* st = StateOf(stream);
    std::lock_guard lock(ev->mu);
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ev->event, st->stream), "cudaEventRecord"));
    ev->stream = st;
    ev->seq = st->ops.fetch_add(1) + 1;
    return Status::Ok();
  }

  Result<bool> EventQuery(const Event& event) override {
    CudaEventState* ev = EventOf(event);
    cudaError_t err = cudaEventQuery(ev->event);
    if (err == cudaErrorNotReady) return false;
    STRATA_RETURN_IF_ERROR(CudaStatus(err, "cudaEventQuery"));
    STRATA_RETURN_IF_ERROR(RecordedError(ev));
    return true;
  }

  Status EventSynchronize(const Event& event) override {
    CudaEventState* ev = EventOf(event);
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(ev->event), "cudaEventSynchronize"));
    return RecordedError(ev);
  }

  Result<float> EventElapsedMs(const Event& start, const Event& end) override {
    CudaEventState* a = EventOf(start);
    CudaEventState* b = EventOf(end);
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
    auto* ev = reinterpret_cast<CudaEventState*>(event_id);
    cudaEventDestroy(ev->event);  // CUDA releases it once pending work completes
    delete ev;
  }

 private:
  Status Activate() const { return CudaStatus(cudaSetDevice(options_.ordinal), "cudaSetDevice"); }
  static CudaStreamState* StateOf(const Stream& s) {
    return reinterpret_cast<CudaStreamState*>(s.id());
  }
  static CudaEventState* EventOf(const Event& e) {
    return reinterpret_cast<CudaEventState*>(e.id());
  }
  static Status RecordedError(CudaEventState* ev) {
    std::lock_guard lock(ev->mu);
    return ev->stream == nullptr ? Status::Ok() : ev->stream->ErrorCovering(ev->seq);
  }

  Status FreeOn(cudaStream_t stream, void* ptr, const char* what) {
    if (ptr == nullptr) return Status::Ok();
    STRATA_RETURN_IF_ERROR(Activate());
    std::lock_guard lock(mu_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) {
      return InvalidArgumentError(std::string(what) + ": not a live device allocation");
    }
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaFreeAsync(ptr, stream), "cudaFreeAsync"));
    stats_.in_use_bytes -= it->second;
    ++stats_.free_count;
    sizes_.erase(it);
    return Status::Ok();
  }

  const CudaDeviceOptions options_;
  const std::string name_;
  const size_t capacity_;
  DeviceCaps caps_;
  cudaStream_t alloc_stream_ = nullptr;

  mutable std::mutex mu_;
  std::vector<CudaStreamState*> streams_;
  std::unordered_map<void*, size_t> sizes_;
  DeviceMemoryStats stats_;
};

}  // namespace

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
