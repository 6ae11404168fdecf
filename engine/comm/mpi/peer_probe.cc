#include "engine/comm/mpi/peer_probe.h"

#include <chrono>
#include <thread>
#include <vector>

namespace strata::internal {
namespace {

CollectiveDesc Unpack(const int64_t* r) {
  CollectiveDesc d;
  d.kind = static_cast<CollectiveKind>(r[4]);
  d.dtype = static_cast<DType>(r[5]);
  d.numel = static_cast<size_t>(r[6]);
  d.op = static_cast<ReduceOp>(r[7]);
  d.root = static_cast<int>(r[8]);
  return d;
}

void Drop(MPI_Request* req) {
  if (*req == MPI_REQUEST_NULL) return;
  MPI_Cancel(req);
  MPI_Request_free(req);
}

}  // namespace

PeerProbe::PeerProbe(MPI_Comm comm, int rank, int world) : comm_(comm), rank_(rank), world_(world) {
  PostQuery();
}

PeerProbe::~PeerProbe() {
  Drop(&query_req_);
  for (auto& p : sends_) Drop(&p.req);
  for (auto& p : asks_) Drop(&p.req);
}

void PeerProbe::PostQuery() {
  if (MPI_Irecv(query_in_.data(), 1, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, comm_, &query_req_) !=
      MPI_SUCCESS) {
    query_req_ = MPI_REQUEST_NULL;  // no health answers; timeouts still fire
  }
}

void PeerProbe::Service() {
  for (int answered = 0; query_req_ != MPI_REQUEST_NULL && answered < world_; ++answered) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&query_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
    Pending& reply = sends_.emplace_back();
    const QueueProgress progress = queue_ != nullptr ? queue_->Progress() : QueueProgress{};
    CollectiveDesc d;
    const bool has = queue_ != nullptr && queue_->FindDesc(static_cast<uint64_t>(query_in_[0]), &d);
    reply.data = {static_cast<int64_t>(progress.enqueued),
                  static_cast<int64_t>(progress.started),
                  static_cast<int64_t>(progress.completed),
                  has ? 1 : 0,
                  static_cast<int64_t>(d.kind),
                  static_cast<int64_t>(d.dtype),
                  static_cast<int64_t>(d.numel),
                  static_cast<int64_t>(d.op),
                  d.root};
    if (MPI_Isend(reply.data.data(), static_cast<int>(reply.data.size()), MPI_INT64_T,
                  st.MPI_SOURCE, kReplyTag, comm_, &reply.req) != MPI_SUCCESS) {
      sends_.pop_back();
    }
    PostQuery();
  }
  std::erase_if(sends_, [](Pending& p) {
    int flag = 0;
    return MPI_Test(&p.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag;
  });
}

std::string PeerProbe::Diagnose(const CollectiveDesc& op, double grace_s) {
  if (!asks_.empty()) return "";  // asked once already (the queue fails after a timeout)
  ask_[0] = static_cast<int64_t>(op.seq);
  std::vector<Pending*> reply(static_cast<size_t>(world_), nullptr);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    Pending& send = asks_.emplace_back();
    MPI_Isend(ask_.data(), 1, MPI_INT64_T, p, kQueryTag, comm_, &send.req);
    Pending& recv = asks_.emplace_back();
    MPI_Irecv(recv.data.data(), static_cast<int>(recv.data.size()), MPI_INT64_T, p, kReplyTag,
              comm_, &recv.req);
    reply[static_cast<size_t>(p)] = &recv;
  }
  std::vector<bool> got(static_cast<size_t>(world_), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  int missing = world_ - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    Service();  // peers may be asking us at the same time
    for (int p = 0; p < world_; ++p) {
      Pending* r = reply[static_cast<size_t>(p)];
      if (r == nullptr || got[static_cast<size_t>(p)]) continue;
      int flag = 0;
      if (MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
        got[static_cast<size_t>(p)] = true;
        --missing;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::string absent, details;
  auto add = [&](int p, const std::string& what) {
    details += (details.empty() ? "" : "; ") + ("rank " + std::to_string(p) + " " + what);
    absent += (absent.empty() ? "" : ", ") + std::to_string(p);
  };
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    if (!got[static_cast<size_t>(p)]) {
      add(p, "did not answer (exited, killed or stuck)");
      continue;
    }
    const int64_t* r = reply[static_cast<size_t>(p)]->data.data();
    const auto seq = static_cast<int64_t>(op.seq);
    CollectiveDesc theirs = Unpack(r);
    theirs.seq = op.seq;
    if (r[0] < seq) {
      add(p, "has not called it (its last call: #" + std::to_string(r[0]) + ")");
    } else if (r[1] < seq) {
      add(p, "called it but its stream has not reached it (started up to #" + std::to_string(r[1]) +
                 ")");
    } else if (r[3] == 1 && !theirs.SameShape(op)) {
      add(p, "is in " + theirs.ToString() + ": mismatched collective");
    } else if (r[2] >= seq) {
      continue;  // completed it: not the one holding us up
    }
    // else: waiting in the same collective, like us
  }
  if (absent.empty()) return "every rank is in it (transport stalled?)";
  return "waiting for rank(s) " + absent + ": " + details;
}

}  // namespace strata::internal
