#include "engine/comm/mpi/size_check.h"

#include <string>

#include "engine/comm/mpi/mpi_env.h"

namespace strata::internal {

Status SizeCheck::Start(MPI_Comm comm, int world, const CollectiveDesc& desc) {
  desc_ = desc;
  world_ = world;
  mine_ = {static_cast<int64_t>(desc.kind), static_cast<int64_t>(desc.dtype),
           static_cast<int64_t>(desc.numel), static_cast<int64_t>(desc.op), desc.root};
  all_.assign(static_cast<size_t>(world) * kFields, 0);
  return MpiStatus(MPI_Iallgather(mine_.data(), kFields, MPI_INT64_T, all_.data(), kFields,
                                  MPI_INT64_T, comm, &req_),
                   "MPI_Iallgather (size check)");
}

Result<bool> SizeCheck::Poll() {
  int flag = 0;
  STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "size check"));
  if (!flag) return false;
  std::string calls;
  bool differ = false;
  for (int r = 0; r < world_; ++r) {
    const int64_t* f = &all_[static_cast<size_t>(r) * kFields];
    CollectiveDesc d = desc_;
    d.kind = static_cast<CollectiveKind>(f[0]);
    d.dtype = static_cast<DType>(f[1]);
    d.numel = static_cast<size_t>(f[2]);
    d.op = static_cast<ReduceOp>(f[3]);
    d.root = static_cast<int>(f[4]);
    differ |= !d.SameShape(desc_);
    calls += (r == 0 ? "" : "; ") + ("rank " + std::to_string(r) + ": " + d.ToString());
  }
  if (differ) {
    return InvalidArgumentError("mismatched collective (strata.comm_check_sizes): " + calls);
  }
  return true;
}

void SizeCheck::Abandon() {
  if (req_ != MPI_REQUEST_NULL) MPI_Request_free(&req_);
}

}  // namespace strata::internal
