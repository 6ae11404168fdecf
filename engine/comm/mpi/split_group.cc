#include "engine/comm/mpi/split_group.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "engine/comm/mpi/mpi_env.h"

namespace strata::internal {

SplitFields MySplitFields(int color, int key) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return {color < 0 ? -1 : color, key, static_cast<int64_t>(std::hash<std::string>()(host) >> 1)};
}

SplitGroup GroupOf(const std::vector<int64_t>& all, int world, int my_rank,
                   const SplitFields& mine) {
  struct Member {
    int64_t key;
    int rank;
    int64_t host;
  };
  std::vector<Member> members;
  for (int r = 0; r < world; ++r) {
    const int64_t* f = &all[static_cast<size_t>(r) * 3];
    if (f[0] == mine[0]) members.push_back({f[1], r, f[2]});
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const Member& a, const Member& b) { return a.key < b.key; });
  SplitGroup g;
  for (const Member& m : members) {
    if (m.rank == my_rank) g.rank = static_cast<int>(g.ranks.size());
    g.ranks.push_back(m.rank);
    if (m.host == mine[2]) {
      if (m.rank == my_rank) g.local_rank = g.local_world;
      ++g.local_world;
    }
  }
  return g;
}

Result<std::vector<int64_t>> AllGatherSplitFields(MPI_Comm comm, int world, const SplitFields& mine,
                                                  double timeout_s, const std::string& what) {
  struct Buffers {
    SplitFields mine;
    std::vector<int64_t> all;
  };
  auto b = std::make_unique<Buffers>(
      Buffers{mine, std::vector<int64_t>(static_cast<size_t>(world) * 3)});
  MPI_Request req = MPI_REQUEST_NULL;
  STRATA_RETURN_IF_ERROR(MpiStatus(
      MPI_Iallgather(b->mine.data(), 3, MPI_INT64_T, b->all.data(), 3, MPI_INT64_T, comm, &req),
      what + ": MPI_Iallgather"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int flag = 0; !flag;) {
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), what));
    if (!flag && std::chrono::steady_clock::now() > deadline) {
      MarkMpiUnclean();
      (void)b.release();  // NOLINT: the request stays pending on these buffers; the job is failing
      return AbortedError(what + ": not every rank called Split within " +
                          std::to_string(timeout_s) + " s (strata.comm_timeout_s)");
    }
    if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return std::move(b->all);
}

Result<MPI_Comm> CreateGroupComm(MPI_Comm parent, const SplitGroup& group, int tag,
                                 const std::string& what) {
  MPI_Group parent_group, sub_group;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_group(parent, &parent_group);
  MPI_Group_incl(parent_group, static_cast<int>(group.ranks.size()), group.ranks.data(),
                 &sub_group);
  Status s = MpiStatus(MPI_Comm_create_group(parent, sub_group, tag, &sub),
                       what + ": MPI_Comm_create_group");
  MPI_Group_free(&sub_group);
  MPI_Group_free(&parent_group);
  STRATA_RETURN_IF_ERROR(s);
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  return sub;
}

}  // namespace strata::internal
