#include "engine/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/half.h"
#include "engine/comm/collective.h"
#include "engine/comm/collective_queue.h"
#include "engine/comm/mpi/mpi_env.h"
#include "engine/comm/mpi/peer_probe.h"
#include "engine/comm/mpi/size_check.h"

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
    const CollectiveDesc& d = desc();
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_->ordinal), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"));
    const ncclDataType_t type = NcclType(d.dtype);
    const size_t es = DTypeBytes(d.dtype);
    const size_t shard = ShardNumel(d.numel, world_);
    const size_t padded = shard * static_cast<size_t>(world_);
    cudaStream_t st = s_->stream;
    switch (d.kind) {
      case CollectiveKind::kAllGather: {
        void* dst = recv;
        if (padded != d.numel) {
          STRATA_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&tmp_, padded * es, st), "alloc"));
          dst = tmp_;
        }
        return NcclStatus(ncclAllGather(send, dst, shard, type, s_->nccl, st), "ncclAllGather");
      }
      case CollectiveKind::kReduceScatter: {
        const void* src = send;
        if (padded != d.numel) {
          STRATA_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&tmp_, padded * es, st), "alloc"));
          auto* t = static_cast<char*>(tmp_);
          STRATA_RETURN_IF_ERROR(CudaStatus(
              cudaMemcpyAsync(t, send, d.numel * es, cudaMemcpyDeviceToDevice, st), "pad"));
          STRATA_RETURN_IF_ERROR(
              CudaStatus(cudaMemsetAsync(t + d.numel * es, 0, (padded - d.numel) * es, st), "pad"));
          src = tmp_;
        }
        ncclRedOp_t op = ncclSum;
        if (d.predivide_factor != 1.0) {
          const float scale = static_cast<float>(1.0 / d.predivide_factor);
          uint16_t half = d.dtype == DType::kFloat16 ? FloatToFp16(scale) : FloatToBf16(scale);
          void* scalar = d.dtype == DType::kFloat32 ? static_cast<void*>(const_cast<float*>(&scale))
                                                    : static_cast<void*>(&half);
          STRATA_RETURN_IF_ERROR(NcclStatus(
              ncclRedOpCreatePreMulSum(&op, scalar, type, ncclScalarHostImmediate, s_->nccl),
              "ncclRedOpCreatePreMulSum"));
        }
        Status s = NcclStatus(ncclReduceScatter(src, recv, shard, type, op, s_->nccl, st),
                              "ncclReduceScatter");
        if (op != ncclSum) ncclRedOpDestroy(op, s_->nccl);
        return s;
      }
      case CollectiveKind::kAllReduce:
        return NcclStatus(ncclAllReduce(send, recv, d.numel, type,
                                        d.op == ReduceOp::kSum ? ncclSum : ncclMax, s_->nccl, st),
                          "ncclAllReduce");
      case CollectiveKind::kBroadcast:
        return NcclStatus(ncclBroadcast(recv, recv, d.numel, type, d.root, s_->nccl, st),
                          "ncclBroadcast");
      case CollectiveKind::kBarrier:
      case CollectiveKind::kSplit:
        return NcclStatus(ncclAllReduce(s_->barrier_scratch, s_->barrier_scratch, 1, ncclFloat32,
                                        ncclSum, s_->nccl, st),
                          "ncclAllReduce (barrier)");
    }
    return InternalError("unknown collective");
  }

  // Work after the NCCL call, on the same stream: un-pad an all-gather, free the temporary.
  Status Finish() {
    if (tmp_ == nullptr) return Status::Ok();
    if (desc().kind == CollectiveKind::kAllGather) {
      STRATA_RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(recv, tmp_, desc().numel * DTypeBytes(desc().dtype),
                                     cudaMemcpyDeviceToDevice, s_->stream),
                     "unpad"));
    }
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaFreeAsync(tmp_, s_->stream), "free"));
    tmp_ = nullptr;
    return Status::Ok();
  }

  const NcclShared* s_;
  int rank_, world_;
  bool check_;
  SizeCheck size_check_;
  cudaEvent_t event_ = nullptr;
  void* tmp_ = nullptr;
  bool recorded_ = false;
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
    const bool clean = queue_ == nullptr || queue_->status().ok();
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
    return Status::Ok();
  }

  Status Submit(const CollectiveDesc& d, const void* send, void* recv, const Stream& stream,
                Event* done) override {
    STRATA_RETURN_IF_ERROR(
        ValidateCollective("nccl", d, {send, recv}, rank_, world_, stream, done));
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
