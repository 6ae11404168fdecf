#include "engine/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/half.h"
#include "engine/comm/collective.h"
#include "engine/comm/collective_queue.h"
#include "engine/comm/mpi/mpi_env.h"
#include "engine/comm/mpi/peer_probe.h"
#include "engine/comm/mpi/size_check.h"
#include "offload/device/cuda/cuda_device.h"

namespace strata::internal {
namespace {

// The one seam where NCCL (and the CUDA calls around it) become Status.
Status NcclStatus(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
  std::string msg = what + ": " + ncclGetErrorString(r);
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(msg);
    case ncclSystemError:
    case ncclRemoteError:
      return AbortedError(msg + " (a peer failed or the network broke)");
    case ncclUnhandledCudaError:
      return InternalError(msg);
    default:
      return AbortedError(msg);
  }
}
Status CudaStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  const std::string msg = what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation)
    return OutOfMemoryError("out of memory on tier device: " + msg);
  return InternalError(msg);
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

// Waits for a non-blocking communicator's pending call; Aborted past the deadline.
Status WaitNccl(ncclComm_t comm, double timeout_s, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  ncclResult_t state = ncclInProgress;
  while (true) {
    STRATA_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &state), what));
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (std::chrono::steady_clock::now() > deadline) {
      return AbortedError(what + ": not every rank joined within " + std::to_string(timeout_s) +
                          " s (strata.comm_timeout_s)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

struct NcclShared {
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
  int ordinal = 0;
  void* barrier_scratch = nullptr;  // one float on the device
  MPI_Comm mpi = MPI_COMM_NULL;     // size checks
};

// Enqueues collective `d` on `st`. A padded all-gather / reduce-scatter goes through a temporary
// allocated on `st` (*tmp); FinishOn un-pads it and frees it, on the same stream.
Status IssueOn(const NcclShared& sh, const CollectiveDesc& d, const void* send, void* recv,
               int world, cudaStream_t st, void** tmp) {
  const ncclDataType_t type = NcclType(d.dtype);
  const size_t es = DTypeBytes(d.dtype);
  const size_t shard = ShardNumel(d.numel, world);
  const size_t padded = shard * static_cast<size_t>(world);
  switch (d.kind) {
    case CollectiveKind::kAllGather: {
      void* dst = recv;
      if (padded != d.numel) {
        STRATA_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(tmp, padded * es, st), "alloc"));
        dst = *tmp;
      }
      return NcclStatus(ncclAllGather(send, dst, shard, type, sh.nccl, st), "ncclAllGather");
    }
    case CollectiveKind::kReduceScatter: {
      const void* src = send;
      if (padded != d.numel) {
        STRATA_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(tmp, padded * es, st), "alloc"));
        auto* t = static_cast<char*>(*tmp);
        STRATA_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpyAsync(t, send, d.numel * es, cudaMemcpyDeviceToDevice, st), "pad"));
        STRATA_RETURN_IF_ERROR(
            CudaStatus(cudaMemsetAsync(t + d.numel * es, 0, (padded - d.numel) * es, st), "pad"));
        src = *tmp;
      }
      ncclRedOp_t op = ncclSum;
      if (d.predivide_factor != 1.0) {
        const float scale = static_cast<float>(1.0 / d.predivide_factor);
        uint16_t half = d.dtype == DType::kFloat16 ? FloatToFp16(scale) : FloatToBf16(scale);
        void* scalar = d.dtype == DType::kFloat32 ? static_cast<void*>(const_cast<float*>(&scale))
                                                  : static_cast<void*>(&half);
        STRATA_RETURN_IF_ERROR(NcclStatus(
            ncclRedOpCreatePreMulSum(&op, scalar, type, ncclScalarHostImmediate, sh.nccl),
            "ncclRedOpCreatePreMulSum"));
      }
      Status s = NcclStatus(ncclReduceScatter(src, recv, shard, type, op, sh.nccl, st),
                            "ncclReduceScatter");
      if (op != ncclSum) ncclRedOpDestroy(op, sh.nccl);
      return s;
    }
    case CollectiveKind::kAllReduce:
      return NcclStatus(ncclAllReduce(send, recv, d.numel, type,
                                      d.op == ReduceOp::kSum ? ncclSum : ncclMax, sh.nccl, st),
                        "ncclAllReduce");
    case CollectiveKind::kBroadcast:
      return NcclStatus(ncclBroadcast(recv, recv, d.numel, type, d.root, sh.nccl, st),
                        "ncclBroadcast");
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSplit:
      return NcclStatus(ncclAllReduce(sh.barrier_scratch, sh.barrier_scratch, 1, ncclFloat32,
                                      ncclSum, sh.nccl, st),
                        "ncclAllReduce (barrier)");
  }
  return InternalError("unknown collective");
}

// Work after the NCCL call, on the same stream: un-pad an all-gather, free the temporary.
Status FinishOn(const CollectiveDesc& d, void* recv, cudaStream_t st, void** tmp) {
  if (*tmp == nullptr) return Status::Ok();
  if (d.kind == CollectiveKind::kAllGather) {
    STRATA_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(recv, *tmp, d.numel * DTypeBytes(d.dtype), cudaMemcpyDeviceToDevice, st),
        "unpad"));
  }
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaFreeAsync(*tmp, st), "free"));
  *tmp = nullptr;
  return Status::Ok();
}

class NcclOp final : public QueuedOp {
 public:
  NcclOp(const CollectiveDesc& d, const NcclShared* s, int rank, int world, bool check)
      : QueuedOp(d), s_(s), rank_(rank), world_(world), check_(check) {}
  const void* send = nullptr;
  void* recv = nullptr;

  Status Start() override {
    if (check_) return size_check_.Start(s_->mpi, world_, desc());
    return Issue();
  }

  Result<bool> Poll() override {
    if (check_) {
      STRATA_ASSIGN_OR_RETURN(bool agreed, size_check_.Poll());
      if (!agreed) return false;
      check_ = false;
      STRATA_RETURN_IF_ERROR(Issue());
    }
    ncclResult_t state = ncclSuccess;
    STRATA_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(s_->nccl, &state), "nccl"));
    if (state == ncclInProgress) return false;
    STRATA_RETURN_IF_ERROR(NcclStatus(state, "nccl"));
    if (!recorded_) {
      STRATA_RETURN_IF_ERROR(Finish());
      STRATA_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(event_, s_->stream), "cudaEventRecord"));
      recorded_ = true;
    }
    const cudaError_t q = cudaEventQuery(event_);
    if (q == cudaErrorNotReady) return false;
    STRATA_RETURN_IF_ERROR(CudaStatus(q, "cudaEventQuery"));
    cudaEventDestroy(event_);
    event_ = nullptr;
    return true;
  }

  void Abandon() override { size_check_.Abandon(); }

 private:
  Status Issue() {
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_->ordinal), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"));
    return IssueOn(*s_, desc(), send, recv, world_, s_->stream, &tmp_);
  }

  Status Finish() { return FinishOn(desc(), recv, s_->stream, &tmp_); }

  const NcclShared* s_;
  int rank_, world_;
  bool check_;
  SizeCheck size_check_;
  cudaEvent_t event_ = nullptr;
  void* tmp_ = nullptr;
  bool recorded_ = false;
};

// Note [Direct collectives]
// Without the size check (strata.comm_check_sizes off, the release default) a collective needs no
// host round trip, so it goes straight onto the caller's own cudaStream_t (CudaNativeStreamOf):
// issued at call time under a mutex (call order = issue order on every rank), ordered with the
// caller's other streams by its events, and `done` recorded right after it. No host wait per
// collective. What the progress thread did for queued ops is kept:
//   - the watchdog (DirectWatchdog) records a CUDA event after each collective and polls them; if
//     the oldest makes no progress for timeout_s it marks the communicator failed and aborts the
//     NCCL communicator, so the hung kernels return;
//   - a host function enqueued after each collective returns that failure, which makes it the
//     stream's error (Note [Stream errors]); it returns at once, it never waits.
// With the size check on, collectives go through CollectiveQueue as before (the agreement is an
// MPI exchange on the host).
class DirectWatchdog {
 public:
  DirectWatchdog(double timeout_s, std::string name)
      : timeout_s_(timeout_s), name_(std::move(name)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~DirectWatchdog() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (Pending& p : pending_) cudaEventDestroy(p.event);
  }

  // Called once the abort has to happen (the communicator aborts NCCL).
  void set_on_timeout(std::function<void(const Status&)> f) { on_timeout_ = std::move(f); }

  // The failure every later collective and host check reports (Ok while healthy). Shared with
  // the host functions on the callers' streams, which may run after the watchdog is gone.
  struct Failure {
    std::atomic<bool> failed{false};
    std::mutex mu;
    Status status;
    Status Get() {
      if (!failed.load()) return Status::Ok();
      std::lock_guard lock(mu);
      return status;
    }
  };
  Status status() const { return failure_->Get(); }
  std::shared_ptr<Failure> failure() const { return failure_; }

  // Records an event after `d` on `st` and watches it.
  Status Watch(const CollectiveDesc& d, cudaStream_t st) {
    cudaEvent_t ev = nullptr;
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    Status s = CudaStatus(cudaEventRecord(ev, st), "cudaEventRecord");
    if (!s.ok()) {
      cudaEventDestroy(ev);
      return s;
    }
    {
      std::lock_guard lock(mu_);
      pending_.push_back({ev, d, std::chrono::steady_clock::now()});
    }
    cv_.notify_all();
    return Status::Ok();
  }

 private:
  struct Pending {
    cudaEvent_t event;
    CollectiveDesc desc;
    std::chrono::steady_clock::time_point issued;
  };

  void Run() {
    auto last_progress = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      while (!pending_.empty()) {
        const cudaError_t q = cudaEventQuery(pending_.front().event);
        if (q == cudaErrorNotReady) break;
        cudaEventDestroy(pending_.front().event);
        pending_.pop_front();
        last_progress = std::chrono::steady_clock::now();
      }
      if (pending_.empty() || failure_->failed.load()) continue;
      const auto since = std::max(last_progress, pending_.front().issued);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      if (waited < timeout_s_) continue;
      const Status f = AbortedError(name_ + ": " + pending_.front().desc.ToString() +
                                    " made no progress for " + std::to_string(timeout_s_) +
                                    " s (strata.comm_timeout_s): a peer is missing or hung; the "
                                    "communicator is aborted");
      {
        std::lock_guard flock(failure_->mu);
        failure_->status = f;
      }
      failure_->failed.store(true);
      lock.unlock();
      if (on_timeout_) on_timeout_(f);
      lock.lock();
    }
  }

  const double timeout_s_;
  const std::string name_;
  std::function<void(const Status&)> on_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::shared_ptr<Failure> failure_ = std::make_shared<Failure>();
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

class NcclCommunicator final : public DescribedCommunicator, public QueueHooks {
 public:
  static Result<std::unique_ptr<Communicator>> Create(const CommOptions& options,
                                                      const LaunchEnv& env) {
    auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(options, env));
    STRATA_RETURN_IF_ERROR(c->Init());
    return std::unique_ptr<Communicator>(std::move(c));
  }

  ~NcclCommunicator() override {
    const bool clean = (queue_ == nullptr || queue_->status().ok()) &&
                       (watchdog_ == nullptr || watchdog_->status().ok());
    if (clean && s_.stream != nullptr) {
      // Direct collectives are on the callers' streams: let them drain before NCCL goes.
      cudaSetDevice(s_.ordinal);
      cudaDeviceSynchronize();
    }
    watchdog_.reset();
    queue_.reset();
    probe_.reset();
    if (s_.nccl != nullptr) clean ? ncclCommDestroy(s_.nccl) : ncclCommAbort(s_.nccl);
    if (s_.barrier_scratch != nullptr) cudaFree(s_.barrier_scratch);
    if (s_.stream != nullptr) cudaStreamDestroy(s_.stream);
    if (!clean) return;
    if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
    if (s_.mpi != MPI_COMM_NULL) MPI_Comm_free(&s_.mpi);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return env_.local_rank; }
  int local_world_size() const override { return env_.local_world_size; }
  std::string_view backend_name() const override { return "nccl"; }

  Result<std::unique_ptr<Communicator>> Split(int /*color*/, int /*key*/) override {
    return UnimplementedError(
        "comm nccl: Split is not implemented yet (ncclCommSplit needs a GPU to test); use the "
        "mpi backend for sub-communicators");
  }

 private:
  NcclCommunicator(const CommOptions& options, const LaunchEnv& env)
      : options_(options), env_(env) {}

  Status Init() {
    STRATA_RETURN_IF_ERROR(EnsureMpi());
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    s_.ordinal = options_.device_ordinal >= 0 ? options_.device_ordinal : env_.local_rank;
    STRATA_RETURN_IF_ERROR(DupWithTimeout(MPI_COMM_WORLD, &s_.mpi, options_.timeout_s,
                                          "comm nccl: bootstrap communicator"));
    STRATA_RETURN_IF_ERROR(DupWithTimeout(MPI_COMM_WORLD, &probe_comm_, options_.timeout_s,
                                          "comm nccl: health channel"));
    const std::string where = "comm nccl (cuda:" + std::to_string(s_.ordinal) + ")";
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_.ordinal), where + ": cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s_.stream, cudaStreamNonBlocking),
                                      where + ": stream"));
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&s_.barrier_scratch, sizeof(float)), where + ": scratch"));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) STRATA_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), where));
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, s_.mpi),
                                     where + ": broadcast of ncclUniqueId"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a rank that never joins is a timeout, not a hang
    STRATA_RETURN_IF_ERROR(
        NcclStatus(ncclCommInitRankConfig(&s_.nccl, world_, id, rank_, &config), where + ": init"));
    STRATA_RETURN_IF_ERROR(WaitNccl(s_.nccl, options_.timeout_s, where + ": ncclCommInitRank"));
    probe_ = std::make_unique<PeerProbe>(probe_comm_, rank_, world_);
    queue_ = std::make_unique<CollectiveQueue>(
        "comm nccl (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")",
        options_.timeout_s, this);
    probe_->Attach(queue_.get());
    if (!options_.check_sizes) {  // Note [Direct collectives]
      watchdog_ = std::make_unique<DirectWatchdog>(
          options_.timeout_s,
          "comm nccl (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")");
      watchdog_->set_on_timeout([this](const Status&) {
        std::lock_guard lock(direct_mu_);
        if (s_.nccl != nullptr) ncclCommAbort(s_.nccl);  // hung kernels return
        s_.nccl = nullptr;
      });
    }
    return Status::Ok();
  }

  // Note [Direct collectives].
  Status SubmitDirect(const CollectiveDesc& desc, const void* send, void* recv,
                      const Stream& stream, Event* done) {
    STRATA_ASSIGN_OR_RETURN(CudaNativeStream native, CudaNativeStreamOf(stream));
    if (native.ordinal != s_.ordinal) {
      return InvalidArgumentError(
          "comm nccl: the stream is on cuda:" + std::to_string(native.ordinal) +
          " but this communicator is on " + "cuda:" + std::to_string(s_.ordinal));
    }
    const auto st = static_cast<cudaStream_t>(native.stream);
    std::lock_guard lock(direct_mu_);
    STRATA_RETURN_IF_ERROR(watchdog_->status());
    if (s_.nccl == nullptr) return FailedPreconditionError("comm nccl: the communicator failed");
    CollectiveDesc d = desc;
    d.seq = ++direct_seq_;
    void* tmp = nullptr;
    const std::string what = "comm nccl: " + d.ToString();
    STRATA_RETURN_IF_ERROR(IssueOn(s_, d, send, recv, world_, st, &tmp).WithContext(what));
    // The communicator is non-blocking: wait until NCCL accepted the enqueue (not for the
    // collective to run), bounded by the timeout.
    STRATA_RETURN_IF_ERROR(WaitNccl(s_.nccl, options_.timeout_s, what));
    STRATA_RETURN_IF_ERROR(FinishOn(d, recv, st, &tmp).WithContext(what));
    STRATA_RETURN_IF_ERROR(watchdog_->Watch(d, st).WithContext(what));
    STRATA_RETURN_IF_ERROR(stream.LaunchHostFunc(
        [failure = watchdog_->failure()]() -> Status { return failure->Get(); }));
    if (done != nullptr) STRATA_RETURN_IF_ERROR(done->Record(stream));
    return Status::Ok();
  }

  Status Submit(const CollectiveDesc& d, const void* send, void* recv, const Stream& stream,
                Event* done) override {
    STRATA_RETURN_IF_ERROR(
        ValidateCollective("nccl", d, {send, recv}, rank_, world_, stream, done));
    if (watchdog_ != nullptr) return SubmitDirect(d, send, recv, stream, done);
    auto op = std::make_shared<NcclOp>(d, &s_, rank_, world_, options_.check_sizes);
    op->send = send;
    op->recv = recv;
    return queue_->Enqueue(stream, op, done);
  }

  void Service() override { probe_->Service(); }
  std::string DiagnoseTimeout(const CollectiveDesc& op) override {
    MarkMpiUnclean();
    return probe_->Diagnose(op, std::clamp(options_.timeout_s / 4, 0.2, 2.0));
  }
  void OnFailure(const Status& /*error*/) override {
    if (s_.nccl != nullptr) ncclCommAbort(s_.nccl);  // kernels waiting on peers return
    s_.nccl = nullptr;
  }

  CommOptions options_;
  LaunchEnv env_;
  int rank_ = 0, world_ = 1;
  NcclShared s_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  std::unique_ptr<PeerProbe> probe_;
  std::unique_ptr<CollectiveQueue> queue_;
  // Note [Direct collectives] (size check off).
  std::mutex direct_mu_;  // call order = issue order; guards s_.nccl against the abort
  uint64_t direct_seq_ = 0;
  std::unique_ptr<DirectWatchdog> watchdog_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options,
                                                             const LaunchEnv& env) {
  if (options.device_kind != DeviceKind::kCuda) {
    return InvalidArgumentError("comm nccl: needs CUDA device buffers but the device is " +
                                std::string(DeviceKindName(options.device_kind)) +
                                " (strata.comm_backend: use mpi or auto)");
  }
  return NcclCommunicator::Create(options, env);
}

}  // namespace strata::internal
