#include "engine/comm/mpi/mpi_env.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "engine/comm/host_math.h"

namespace strata::internal {
namespace {

template <DType kType, ReduceOp kOp>
void UserOp(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  Combine<kType, kOp>(in, inout, static_cast<size_t>(*len));
}

struct MpiState {
  std::once_flag once;
  Status init_status;
  bool we_initialised = false;
  std::atomic<bool> unclean{false};
  MPI_Op ops[2][2] = {};  // [fp16, bf16][sum, max]

  ~MpiState() {
    if (!we_initialised || unclean.load()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& row : ops) {
      for (MPI_Op& op : row) MPI_Op_free(&op);
    }
    MPI_Finalize();
  }
};

MpiState& State() {
  static MpiState state;  // destroyed at exit, after main: finalises MPI
  return state;
}

Status Init(MpiState& st) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = 0;
  if (!initialised) {
    STRATA_RETURN_IF_ERROR(MpiStatus(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    st.we_initialised = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return UnavailableError(
        "comm mpi: MPI provides thread level " + std::to_string(provided) +
        ", the mpi backend needs MPI_THREAD_MULTIPLE (its progress thread calls MPI; an "
        "application that initialises MPI itself must ask for it)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_User_function* fns[2][2] = {
      {&UserOp<DType::kFloat16, ReduceOp::kSum>, &UserOp<DType::kFloat16, ReduceOp::kMax>},
      {&UserOp<DType::kBFloat16, ReduceOp::kSum>, &UserOp<DType::kBFloat16, ReduceOp::kMax>}};
  for (int t = 0; t < 2; ++t) {
    for (int o = 0; o < 2; ++o) {
      STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Op_create(fns[t][o], 1, &st.ops[t][o]),
                                       "MPI_Op_create (16-bit reduction)"));
    }
  }
  return Status::Ok();
}

}  // namespace

Status EnsureMpi() {
  MpiState& st = State();
  std::call_once(st.once, [&] { st.init_status = Init(st); });
  return st.init_status;
}

void MarkMpiUnclean() { State().unclean.store(true); }

Status MpiStatus(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  int cls = 0;
  MPI_Error_class(rc, &cls);
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  std::string msg = std::string(what) + ": " + std::string(text, static_cast<size_t>(len)) +
                    " (MPI error class " + std::to_string(cls) + ")";
  switch (cls) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_COMM:
      return InvalidArgumentError(msg);
    case MPI_ERR_TRUNCATE:
      return InvalidArgumentError(msg + ": ranks passed different sizes to one collective");
    case MPI_ERR_NO_MEM:
      return OutOfMemoryError("out of memory on tier cpu: " + msg);
    default:
      return AbortedError(msg);
  }
}

Status DupWithTimeout(MPI_Comm parent, MPI_Comm* out, double timeout_s, const std::string& what) {
  MPI_Request req = MPI_REQUEST_NULL;
  STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Comm_idup(parent, out, &req), what + ": MPI_Comm_idup"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (int flag = 0; !flag;) {
    STRATA_RETURN_IF_ERROR(MpiStatus(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), what));
    if (!flag && std::chrono::steady_clock::now() > deadline) {
      MarkMpiUnclean();
      return AbortedError(what + ": not every rank arrived within " + std::to_string(timeout_s) +
                          " s (strata.comm_timeout_s)");
    }
    if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  return Status::Ok();
}

MPI_Datatype MpiType(DType dtype) { return dtype == DType::kFloat32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op MpiOp(ReduceOp op, DType dtype) {
  if (dtype == DType::kFloat32) return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  return State().ops[dtype == DType::kFloat16 ? 0 : 1][op == ReduceOp::kSum ? 0 : 1];
}

}  // namespace strata::internal
