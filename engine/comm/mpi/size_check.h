// SizeCheck: the collective size check (CommOptions::check_sizes). Before a collective, every
// rank all-gathers (kind, dtype, numel, op, root) over MPI without blocking; if any rank differs,
// every rank fails with the same message listing each rank's call, instead of a collective that
// corrupts memory or hangs. Used by the mpi and nccl backends (nccl bootstraps over MPI).
// Internal; progress thread only.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <vector>

#include "engine/comm/collective.h"

namespace strata::internal {

class SizeCheck {
 public:
  // Posts the all-gather of `desc` on `comm` (world ranks).
  Status Start(MPI_Comm comm, int world, const CollectiveDesc& desc);
  // true once every rank's call is known and they agree; InvalidArgument naming the ranks and
  // their calls if not.
  Result<bool> Poll();
  // Frees a request still pending (after a timeout).
  void Abandon();

 private:
  static constexpr int kFields = 5;
  CollectiveDesc desc_;
  int world_ = 1;
  std::array<int64_t, kFields> mine_{};
  std::vector<int64_t> all_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

}  // namespace strata::internal
