// SplitGroup: who ends up together after Communicator::Split, computed the same way on every rank
// from an all-gather of each rank's (color, key, host) — the mpi backend inside its queued split
// op, the nccl backend around ncclCommSplit (whose MPI side, for size checks and health queries,
// needs the same groups). Internal.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::internal {

// One rank's fields in the all-gather: color (< 0: no group), key, a hash of the host name.
using SplitFields = std::array<int64_t, 3>;
SplitFields MySplitFields(int color, int key);

struct SplitGroup {
  std::vector<int> ranks;  // old ranks, ordered by (key, old rank): the new rank is the index
  int rank = 0;            // this rank's index in `ranks`
  int local_rank = 0;      // among the members on this rank's host
  int local_world = 0;
};

// This rank's group from every rank's fields (`all`: world x 3, rank-major). Meaningless when
// mine[0] < 0 (no group).
SplitGroup GroupOf(const std::vector<int64_t>& all, int world, int my_rank,
                   const SplitFields& mine);

// A blocking all-gather of the fields on `comm`, polled against `timeout_s`: a rank that never
// calls is Aborted (and MPI marked unclean), not a hang. For callers without a progress thread.
Result<std::vector<int64_t>> AllGatherSplitFields(MPI_Comm comm, int world, const SplitFields& mine,
                                                  double timeout_s, const std::string& what);

// MPI_Comm_create_group of `group` over `parent` (members only; they are known to be alive),
// returning errors (MPI_ERRORS_RETURN). `tag` must be the same on every member.
Result<MPI_Comm> CreateGroupComm(MPI_Comm parent, const SplitGroup& group, int tag,
                                 const std::string& what);

}  // namespace strata::internal
