// PeerProbe: the health channel that lets a rank whose collective timed out say which ranks are
// missing and why. Each rank keeps a receive posted on a private duplicate of its communicator;
// its progress thread answers a query "where are you with collective #k?" with its counters and
// its view of #k. On a timeout, the waiting rank asks every peer and waits a short grace period:
// no answer = the peer exited, was killed or is stuck outside the progress thread; an answer
// says whether the peer has not called #k yet, is inside it (with the same or different sizes),
// or had not reached it on its stream. Costs nothing per collective. Internal; progress thread
// only.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <list>
#include <string>

#include "engine/comm/collective_queue.h"

namespace strata::internal {

class PeerProbe {
 public:
  // `comm` (owned by the caller, used for nothing else) must outlive the probe.
  PeerProbe(MPI_Comm comm, int rank, int world);
  // Cancels the posted receive and pending replies.
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // The queue whose progress is reported to peers (set once, before the first Service).
  void Attach(const CollectiveQueue* queue) { queue_ = queue; }
  // Answers queries that arrived.
  void Service();
  // Asks every peer about `op` and describes the ranks not in it, waiting at most `grace_s`.
  std::string Diagnose(const CollectiveDesc& op, double grace_s);

 private:
  static constexpr int kQueryTag = 1, kReplyTag = 2;
  // {enqueued, started, completed, has_desc, kind, dtype, numel, op, root}
  using Reply = std::array<int64_t, 9>;
  void PostQuery();

  MPI_Comm comm_;
  int rank_, world_;
  const CollectiveQueue* queue_ = nullptr;
  std::array<int64_t, 1> query_in_{};
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    Reply data{};
  };
  std::list<Pending> sends_;      // replies in flight (buffers must not move)
  std::array<int64_t, 1> ask_{};  // our query, sent to every peer
  std::list<Pending> asks_;       // our queries' sends and the replies they wait for
};

}  // namespace strata::internal
