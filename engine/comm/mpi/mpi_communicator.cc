#include "engine/comm/mpi/mpi_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "engine/comm/collective.h"
#include "engine/comm/collective_queue.h"
#include "engine/comm/host_math.h"
#include "engine/comm/mpi/mpi_env.h"
#include "engine/comm/mpi/peer_probe.h"
#include "engine/comm/mpi/size_check.h"
#include "engine/comm/mpi/split_group.h"
#include "offload/device/api/device.h"

namespace strata::internal {
namespace {

using Bytes = std::vector<std::byte>;

bool Overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  return x < y + bn && y < x + an;
}

// With size checks the check runs on `check_comm` and the collective on `comm` once the check
// agrees and every earlier op has issued (Note [Issue order with size checks]).
class MpiCollectiveOp final : public QueuedOp {
 public:
  MpiCollectiveOp(const CollectiveDesc& d, MPI_Comm comm, MPI_Comm check_comm, IssueOrder* order,
                  int rank, int world, bool check)
      : QueuedOp(d),
        comm_(comm),
        check_comm_(check_comm),
        order_(order),
        rank_(rank),
        world_(world),
        check_(check) {}

  const void* send = nullptr;  // host-accessible views (device memory or stage)
  void* recv = nullptr;
  Bytes stage_in, stage_out;  // staging for device memory that is not host-accessible

  Status Start() override {
    if (check_) return size_check_.Start(check_comm_, world_, desc());
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
    int flag = 0;
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test"));
    if (!flag) return false;
    if (gathered_into_scratch_) {
      std::memcpy(recv, scratch_.data(), desc().numel * DTypeBytes(desc().dtype));
    }
    return true;
  }

  void Abandon() override {
    size_check_.Abandon();
    if (!issued_) return;
    // MPI may still write into the scratch buffer of a collective it never finished (a
    // non-blocking collective's request cannot be freed or cancelled): keep it alive.
    new Bytes(std::move(scratch_));  // NOLINT: leaked on purpose, the process is failing
  }

 private:
  // Issues the collective if every earlier op has issued its own; else leaves it to a later Poll.
  Status IssueInOrder() {
    if (issued_ || !order_->MayIssue(desc().seq)) return Status::Ok();
    STRATA_RETURN_IF_ERROR(IssueMain());
    issued_ = true;
    order_->Issued(desc().seq);
    return Status::Ok();
  }

  Status IssueMain() {
    const CollectiveDesc& d = desc();
    const MPI_Datatype type = MpiType(d.dtype);
    const size_t es = DTypeBytes(d.dtype);
    const size_t shard = ShardNumel(d.numel, world_);
    const size_t padded = shard * static_cast<size_t>(world_);
    const int count = static_cast<int>(d.numel), shard_count = static_cast<int>(shard);
    switch (d.kind) {
      case CollectiveKind::kAllGather: {
        void* dst = recv;
        const void* src = send;
        if (padded != d.numel) {
          scratch_.resize(padded * es);
          dst = scratch_.data();
          gathered_into_scratch_ = true;
        }
        if (dst == recv &&
            src == static_cast<char*>(recv) + static_cast<size_t>(rank_) * shard * es) {
          src = MPI_IN_PLACE;
        }
        return MpiStatus(
            MPI_Iallgather(src, shard_count, type, dst, shard_count, type, comm_, &req_),
            "MPI_Iallgather");
      }
      case CollectiveKind::kReduceScatter: {
        const void* src = send;
        if (padded != d.numel || d.predivide_factor != 1.0 ||
            Overlaps(send, d.numel * es, recv, shard * es)) {
          scratch_.resize(padded * es);
          ScaleAndPad(send, scratch_.data(), d.dtype, d.numel, padded,
                      static_cast<float>(1.0 / d.predivide_factor));
          src = scratch_.data();
        }
        return MpiStatus(MPI_Ireduce_scatter_block(src, recv, shard_count, type,
                                                   MpiOp(ReduceOp::kSum, d.dtype), comm_, &req_),
                         "MPI_Ireduce_scatter_block");
      }
      case CollectiveKind::kAllReduce:
        return MpiStatus(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, count, type,
                                        MpiOp(d.op, d.dtype), comm_, &req_),
                         "MPI_Iallreduce");
      case CollectiveKind::kBroadcast:
        return MpiStatus(MPI_Ibcast(recv, count, type, d.root, comm_, &req_), "MPI_Ibcast");
      case CollectiveKind::kBarrier:
      case CollectiveKind::kSplit:
        return MpiStatus(MPI_Ibarrier(comm_, &req_), "MPI_Ibarrier");
    }
    return InternalError("unknown collective");
  }

  MPI_Comm comm_;
  MPI_Comm check_comm_;
  IssueOrder* order_;  // the communicator's; progress thread only
  int rank_, world_;
  bool check_;
  bool issued_ = false;
  SizeCheck size_check_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  Bytes scratch_;
  bool gathered_into_scratch_ = false;
};

struct Topology {
  int local_rank = 0, local_world = 1;
};

class MpiCommunicator final : public DescribedCommunicator, public QueueHooks {
 public:
  // Takes ownership of `comm` (already duplicated for this communicator).
  static Result<std::unique_ptr<MpiCommunicator>> Create(MPI_Comm comm, Topology topo,
                                                         const CommOptions& options) {
    auto c = std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, topo, options));
    MPI_Comm_rank(comm, &c->rank_);
    MPI_Comm_size(comm, &c->world_);
    STRATA_RETURN_IF_ERROR(DupWithTimeout(comm, &c->probe_comm_, options.timeout_s,
                                          "comm mpi: creating the health channel"));
    if (options.check_sizes) {  // Note [Issue order with size checks]
      STRATA_RETURN_IF_ERROR(DupWithTimeout(comm, &c->check_comm_, options.timeout_s,
                                            "comm mpi: creating the size-check channel"));
    }
    c->probe_ = std::make_unique<PeerProbe>(c->probe_comm_, c->rank_, c->world_);
    c->queue_ = std::make_unique<CollectiveQueue>(
        "comm mpi (rank " + std::to_string(c->rank_) + " of " + std::to_string(c->world_) + ")",
        options.timeout_s, c.get());
    c->probe_->Attach(c->queue_.get());
    return c;
  }

  ~MpiCommunicator() override {
    const bool clean = queue_ == nullptr || queue_->status().ok();
    queue_.reset();  // joins the progress thread
    probe_.reset();
    if (!clean) return;  // a failed collective may still hold the communicators
    if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
    if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return topo_.local_rank; }
  int local_world_size() const override { return topo_.local_world; }
  std::string_view backend_name() const override { return "mpi"; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  MpiCommunicator(MPI_Comm comm, Topology topo, const CommOptions& options)
      : comm_(comm), topo_(topo), options_(options) {}

  Status Submit(const CollectiveDesc& d, const void* send, void* recv, const Stream& stream,
                Event* done) override;

  // QueueHooks (progress thread).
  void Service() override { probe_->Service(); }
  std::string DiagnoseTimeout(const CollectiveDesc& op) override {
    MarkMpiUnclean();
    return probe_->Diagnose(op, std::clamp(options_.timeout_s / 4, 0.2, 2.0));
  }

  MPI_Comm comm_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // size checks (CommOptions::check_sizes)
  IssueOrder order_;                     // on comm_; progress thread only
  Topology topo_;
  CommOptions options_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<PeerProbe> probe_;
  std::unique_ptr<CollectiveQueue> queue_;  // destroyed first (joins the thread)
  friend class MpiSplitOp;
};

Status MpiCommunicator::Submit(const CollectiveDesc& d, const void* send, void* recv,
                               const Stream& stream, Event* done) {
  STRATA_RETURN_IF_ERROR(ValidateCollective("mpi", d, {send, recv}, rank_, world_, stream, done));
  const size_t per_call =
      (d.kind == CollectiveKind::kAllGather || d.kind == CollectiveKind::kReduceScatter)
          ? ShardNumel(d.numel, world_)
          : d.numel;
  if (per_call > static_cast<size_t>(INT_MAX)) {
    return InvalidArgumentError("comm mpi: " + d.ToString() + ": more than 2^31-1 elements per " +
                                "rank in one MPI call; split the buffer");
  }
  auto op = std::make_shared<MpiCollectiveOp>(d, comm_, check_comm_, &order_, rank_, world_,
                                              options_.check_sizes);
  op->send = send;
  op->recv = recv;
  const bool stage =
      stream.device() != nullptr && !stream.device()->caps().host_accessible_memory && d.numel > 0;
  if (!stage) return queue_->Enqueue(stream, op, done);
  // Device memory the host cannot touch: D2H into a host stage, the collective, H2D back.
  const size_t in = SendBytes(d, world_), out = RecvBytes(d, world_);
  op->stage_in.resize(in);
  op->stage_out.resize(d.kind == CollectiveKind::kBroadcast ? 0 : out);
  op->send = op->stage_in.data();
  op->recv = d.kind == CollectiveKind::kBroadcast ? op->stage_in.data() : op->stage_out.data();
  STRATA_RETURN_IF_ERROR(stream.CopyAsync(op->stage_in.data(), send, in, CopyKind::kDeviceToHost));
  void* host_out = op->recv;
  STRATA_RETURN_IF_ERROR(queue_->Enqueue(stream, op, nullptr));
  STRATA_RETURN_IF_ERROR(stream.CopyAsync(recv, host_out, out, CopyKind::kHostToDevice));
  return done != nullptr ? done->Record(stream) : Status::Ok();
}

// Split: an all-gather of (color, key, host) under the watchdog proves every rank is there; then
// each group's members create their communicator (blocking, but among ranks known to be alive).
class MpiSplitOp final : public QueuedOp {
 public:
  MpiSplitOp(MpiCommunicator* parent, int color, int key)
      : QueuedOp({CollectiveKind::kSplit}), parent_(parent), mine_(MySplitFields(color, key)) {}
  std::unique_ptr<Communicator> result;

  Status Start() override { return IssueInOrder(); }

  Result<bool> Poll() override {
    STRATA_RETURN_IF_ERROR(IssueInOrder());
    if (!issued_) return false;
    int flag = 0;
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "split"));
    if (!flag) return false;
    if (mine_[0] < 0) return true;
    const SplitGroup g = GroupOf(all_, parent_->world_, parent_->rank_, mine_);
    const int tag = static_cast<int>(desc().seq % 32000);
    STRATA_ASSIGN_OR_RETURN(MPI_Comm sub, CreateGroupComm(parent_->comm_, g, tag, "split"));
    const Topology topo{g.local_rank, g.local_world};
    STRATA_ASSIGN_OR_RETURN(result, MpiCommunicator::Create(sub, topo, parent_->options_));
    return true;
  }

 private:
  // The all-gather on the parent's communicator, after every earlier op's collective (Note [Issue
  // order with size checks]).
  Status IssueInOrder() {
    if (issued_ || !parent_->order_.MayIssue(desc().seq)) return Status::Ok();
    all_.resize(static_cast<size_t>(parent_->world_) * 3);
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Iallgather(mine_.data(), 3, MPI_INT64_T, all_.data(), 3,
                                                    MPI_INT64_T, parent_->comm_, &req_),
                                     "MPI_Iallgather (split)"));
    issued_ = true;
    parent_->order_.Issued(desc().seq);
    return Status::Ok();
  }

  MpiCommunicator* parent_;
  bool issued_ = false;
  SplitFields mine_;
  std::vector<int64_t> all_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

Result<std::unique_ptr<Communicator>> MpiCommunicator::Split(int color, int key) {
  auto op = std::make_shared<MpiSplitOp>(this, color < 0 ? kNoColor : color, key);
  STRATA_RETURN_IF_ERROR(queue_->RunBlocking(op));
  return std::move(op->result);
}

}  // namespace

Result<std::unique_ptr<Communicator>> CreateMpiCommunicator(const CommOptions& options,
                                                            const LaunchEnv& env) {
  STRATA_RETURN_IF_ERROR(EnsureMpi());
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (env.launched() && (env.rank != rank || env.world_size != world)) {
    return InvalidArgumentError("comm mpi: the launch environment says " + env.ToString() +
                                " but MPI's world is rank " + std::to_string(rank) + " of " +
                                std::to_string(world) +
                                ": start the program with `strata launch` or mpirun");
  }
  Topology topo;
  if (env.launched()) topo = {env.local_rank, env.local_world_size};
  MPI_Comm comm = MPI_COMM_NULL;
  STRATA_RETURN_IF_ERROR(DupWithTimeout(MPI_COMM_WORLD, &comm, options.timeout_s,
                                        "comm mpi: creating the world communicator"));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> c,
                          MpiCommunicator::Create(comm, topo, options));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace strata::internal
