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
#include "engine/comm/mpi/split_group.h"
#include "engine/comm/nccl/direct_watchdog.h"
#include "engine/comm/nccl/nccl_status.h"
#include "offload/device/cuda/cuda_device.h"

namespace strata::internal {
namespace {

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

// A queued collective (size checks on): the check over MPI, then the NCCL call once every earlier
// op has issued its own (Note [Issue order with size checks]).
class NcclOp final : public QueuedOp {
 public:
  NcclOp(const CollectiveDesc& d, const NcclShared* s, IssueOrder* order, int rank, int world,
         bool check)
      : QueuedOp(d), s_(s), order_(order), rank_(rank), world_(world), check_(check) {}
  const void* send = nullptr;
  void* recv = nullptr;

  Status Start() override {
    if (check_) return size_check_.Start(s_->mpi, world_, desc());
    return IssueInOrder();
  }

  Result<bool> Poll() override {
    if (check_) {
      STRATA_ASSIGN_OR_RETURN(bool agreed, size_check_.Poll());
      if (!agreed) return false;
      check_ = false;
    }
    STRATA_RETURN_IF_ERROR(IssueInOrder());
    if (!issued_) return false;
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
  Status IssueInOrder() {
    if (issued_ || !order_->MayIssue(desc().seq)) return Status::Ok();
    STRATA_RETURN_IF_ERROR(Issue());
    issued_ = true;
    order_->Issued(desc().seq);
    return Status::Ok();
  }

  Status Issue() {
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_->ordinal), "cudaSetDevice"));
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"));
    return IssueOn(*s_, desc(), send, recv, world_, s_->stream, &tmp_);
  }

  Status Finish() { return FinishOn(desc(), recv, s_->stream, &tmp_); }

  const NcclShared* s_;
  IssueOrder* order_;  // the communicator's; progress thread only
  int rank_, world_;
  bool check_;
  bool issued_ = false;
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
    if (split_mpi_ != MPI_COMM_NULL) MPI_Comm_free(&split_mpi_);
    if (s_.mpi != MPI_COMM_NULL) MPI_Comm_free(&s_.mpi);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return env_.local_rank; }
  int local_world_size() const override { return env_.local_world_size; }
  std::string_view backend_name() const override { return "nccl"; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  NcclCommunicator(const CommOptions& options, const LaunchEnv& env)
      : options_(options), env_(env) {}

  // The MPI side of a communicator over `base` (MPI_COMM_WORLD or a split's group): the size-check,
  // health and split channels, each a duplicate of `base`.
  Status InitMpi(MPI_Comm base) {
    MPI_Comm_rank(base, &rank_);
    MPI_Comm_size(base, &world_);
    STRATA_RETURN_IF_ERROR(
        DupWithTimeout(base, &s_.mpi, options_.timeout_s, "comm nccl: bootstrap communicator"));
    STRATA_RETURN_IF_ERROR(
        DupWithTimeout(base, &probe_comm_, options_.timeout_s, "comm nccl: health channel"));
    return DupWithTimeout(base, &split_mpi_, options_.timeout_s, "comm nccl: split channel");
  }

  // The world communicator: MPI, then NCCL bootstrapped over it.
  Status Init() {
    STRATA_RETURN_IF_ERROR(EnsureMpi());
    s_.ordinal = options_.device_ordinal >= 0 ? options_.device_ordinal : env_.local_rank;
    STRATA_RETURN_IF_ERROR(InitMpi(MPI_COMM_WORLD));
    const std::string where = "comm nccl (cuda:" + std::to_string(s_.ordinal) + ")";
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_.ordinal), where + ": cudaSetDevice"));
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
    return Start();
  }

  // A split's communicator: `base` (the group's MPI communicator, freed here) and `nccl` (from
  // ncclCommSplit, owned from here on) on the parent's device.
  Status InitSplit(MPI_Comm base, ncclComm_t nccl) {
    s_.ordinal = options_.device_ordinal;
    s_.nccl = nccl;
    Status s = InitMpi(base);
    MPI_Comm_free(&base);
    STRATA_RETURN_IF_ERROR(s);
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_.ordinal), "comm nccl: cudaSetDevice"));
    return Start();
  }

  // What every communicator has once NCCL is up: its stream, the barrier's scratch, the health
  // channel's probe, the queue and (size checks off) the direct path's watchdog.
  Status Start() {
    const std::string where = "comm nccl (cuda:" + std::to_string(s_.ordinal) + ")";
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s_.stream, cudaStreamNonBlocking),
                                      where + ": stream"));
    STRATA_RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&s_.barrier_scratch, sizeof(float)), where + ": scratch"));
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
    auto op = std::make_shared<NcclOp>(d, &s_, &order_, rank_, world_, options_.check_sizes);
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

  // ncclCommSplit in call order with the collectives (Note [NCCL split]).
  Result<ncclComm_t> SplitNccl(int color, int key);

  CommOptions options_;
  LaunchEnv env_;
  int rank_ = 0, world_ = 1;
  NcclShared s_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  MPI_Comm split_mpi_ = MPI_COMM_NULL;  // Split's agreement and groups; Split callers only
  std::mutex split_mu_;                 // one Split at a time (split_mpi_, split_count_)
  int split_count_ = 0;
  std::unique_ptr<PeerProbe> probe_;
  std::unique_ptr<CollectiveQueue> queue_;
  IssueOrder order_;  // queued ops on s_.nccl; progress thread only
  // Note [Direct collectives] (size check off).
  std::mutex direct_mu_;  // call order = issue order; guards s_.nccl against the abort
  uint64_t direct_seq_ = 0;
  std::unique_ptr<DirectWatchdog> watchdog_;
  friend class NcclSplitOp;
};

// Note [NCCL split]
// Compiled, never run: this machine has no GPU (NCCL 2.28 headers under /usr/local/cuda;
// ncclCommSplit needs >= 2.18). Split is three steps, every rank in the same call order:
//   1. an all-gather of (color, key, host) on the split channel (MPI, bounded by the timeout):
//      every rank is there, and each learns its group (split_group.h, as the mpi backend);
//   2. ncclCommSplit on the parent's NCCL communicator, which must sit in the same place among
//      the collectives on every rank: with size checks off it is issued under the direct path's
//      mutex (call order = issue order); with them on it is a queued op that waits for every
//      earlier op to issue (Note [Issue order with size checks]). The child inherits the
//      parent's non-blocking config, so it is polled against the timeout;
//   3. the group's MPI communicator (MPI_Comm_create_group on the split channel, among members
//      known to be alive) for the child's size checks and health queries.
// A rank with kNoColor takes part in 1 and 2 (NCCL_SPLIT_NOCOLOR) and gets nullptr.
class NcclSplitOp final : public QueuedOp {
 public:
  NcclSplitOp(NcclCommunicator* parent, int color, int key)
      : QueuedOp({CollectiveKind::kSplit}), parent_(parent), color_(color), key_(key) {}
  ncclComm_t child = nullptr;

  Status Start() override { return IssueInOrder(); }
  Result<bool> Poll() override {
    STRATA_RETURN_IF_ERROR(IssueInOrder());
    if (!issued_) return false;
    ncclResult_t state = ncclSuccess;
    ncclComm_t watched = child != nullptr ? child : parent_->s_.nccl;
    STRATA_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(watched, &state), "ncclCommSplit"));
    if (state == ncclInProgress) return false;
    STRATA_RETURN_IF_ERROR(NcclStatus(state, "ncclCommSplit"));
    return true;
  }

 private:
  Status IssueInOrder() {
    if (issued_ || !parent_->order_.MayIssue(desc().seq)) return Status::Ok();
    STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(parent_->s_.ordinal), "cudaSetDevice"));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    STRATA_RETURN_IF_ERROR(
        NcclStatus(ncclCommSplit(parent_->s_.nccl, color_ < 0 ? NCCL_SPLIT_NOCOLOR : color_, key_,
                                 &child, &config),
                   "ncclCommSplit"));
    issued_ = true;
    parent_->order_.Issued(desc().seq);
    return Status::Ok();
  }

  NcclCommunicator* parent_;
  int color_, key_;
  bool issued_ = false;
};

Result<ncclComm_t> NcclCommunicator::SplitNccl(int color, int key) {
  if (watchdog_ == nullptr) {  // size checks on: in order with the queued collectives
    auto op = std::make_shared<NcclSplitOp>(this, color, key);
    STRATA_RETURN_IF_ERROR(queue_->RunBlocking(op));
    return op->child;
  }
  std::lock_guard lock(direct_mu_);  // Note [Direct collectives]: call order = issue order
  STRATA_RETURN_IF_ERROR(watchdog_->status());
  if (s_.nccl == nullptr) return FailedPreconditionError("comm nccl: the communicator failed");
  ++direct_seq_;
  STRATA_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(s_.ordinal), "comm nccl: cudaSetDevice"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  STRATA_RETURN_IF_ERROR(NcclStatus(
      ncclCommSplit(s_.nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config),
      "comm nccl: ncclCommSplit"));
  STRATA_RETURN_IF_ERROR(
      WaitNccl(child != nullptr ? child : s_.nccl, options_.timeout_s, "comm nccl: ncclCommSplit"));
  return child;
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::Split(int color, int key) {
  std::lock_guard lock(split_mu_);
  if (color < 0) color = kNoColor;
  const std::string what =
      "comm nccl (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + "): split";
  const SplitFields mine = MySplitFields(color, key);
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> all,
                          AllGatherSplitFields(split_mpi_, world_, mine, options_.timeout_s, what));
  const int tag = ++split_count_ % 32000;
  STRATA_ASSIGN_OR_RETURN(ncclComm_t nccl, SplitNccl(color, key));
  if (color == kNoColor) return std::unique_ptr<Communicator>();
  const SplitGroup g = GroupOf(all, world_, rank_, mine);
  Result<MPI_Comm> base = CreateGroupComm(split_mpi_, g, tag, what);
  if (!base.ok()) {
    ncclCommAbort(nccl);
    return base.status();
  }
  CommOptions options = options_;
  options.device_ordinal = s_.ordinal;
  LaunchEnv env = env_;
  env.rank = g.rank;
  env.world_size = static_cast<int>(g.ranks.size());
  env.local_rank = g.local_rank;
  env.local_world_size = g.local_world;
  auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(options, env));
  STRATA_RETURN_IF_ERROR(c->InitSplit(*base, nccl));  // c owns nccl (its destructor frees it)
  return std::unique_ptr<Communicator>(std::move(c));
}

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
