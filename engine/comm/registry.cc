// The one file that knows which communicator backends this build has (STRATA_WITH_NCCL from
// strata/config.h; STRATA_COMM_WITH_MPI set by engine/comm/CMakeLists.txt on this file only).
#include "engine/comm/registry.h"

#include <cmath>
#include <cstdio>

#include "core/log.h"
#include "engine/comm/local_communicator.h"
#include "strata/config.h"
#if STRATA_COMM_WITH_MPI
#include "engine/comm/mpi/mpi_communicator.h"
#endif
#if STRATA_COMM_WITH_MPI && STRATA_WITH_NCCL
#include "engine/comm/nccl/nccl_communicator.h"
#define STRATA_COMM_NCCL 1
#else
#define STRATA_COMM_NCCL 0
#endif

namespace strata {

std::string_view CommBackendName(CommBackend backend) {
  switch (backend) {
    case CommBackend::kAuto:
      return "auto";
    case CommBackend::kLocal:
      return "local";
    case CommBackend::kMpi:
      return "mpi";
    case CommBackend::kNccl:
      return "nccl";
  }
  return "?";
}

Result<CommBackend> ParseCommBackend(std::string_view text) {
  for (CommBackend b :
       {CommBackend::kAuto, CommBackend::kLocal, CommBackend::kMpi, CommBackend::kNccl}) {
    if (text == CommBackendName(b)) return b;
  }
  return InvalidArgumentError("strata.comm_backend: unknown backend '" + std::string(text) +
                              "' (allowed: auto, local, mpi, nccl)");
}

std::vector<CommBackend> BuiltCommBackends() {
  std::vector<CommBackend> out = {CommBackend::kLocal};
#if STRATA_COMM_WITH_MPI
  out.push_back(CommBackend::kMpi);
#endif
#if STRATA_COMM_NCCL
  out.push_back(CommBackend::kNccl);
#endif
  return out;
}

Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options,
                                                         const LaunchEnv& env) {
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return InvalidArgumentError("strata.comm_timeout_s: " + std::to_string(options.timeout_s) +
                                " must be a finite number of seconds > 0");
  }
  CommBackend backend = options.backend;
  if (backend == CommBackend::kAuto) {
    if (!env.launched()) {
      backend = CommBackend::kLocal;
    } else {
      backend = options.device_kind == DeviceKind::kCuda && STRATA_COMM_NCCL ? CommBackend::kNccl
                                                                             : CommBackend::kMpi;
    }
  }
  Result<std::unique_ptr<Communicator>> comm = UnavailableError(
      "comm: backend " + std::string(CommBackendName(backend)) +
      " is not built into this Strata (needs " +
      (backend == CommBackend::kNccl ? "CUDA, NCCL and MPI" : "MPI") + " at configure time)");
  switch (backend) {
    case CommBackend::kAuto:
    case CommBackend::kLocal:
      if (env.world_size > 1) {
        return InvalidArgumentError(
            "strata.comm_backend: local is a world of one rank but the "
            "launch environment says " +
            env.ToString() + " (use mpi, nccl or auto)");
      }
      comm = std::unique_ptr<Communicator>(internal::CreateLocalCommunicator());
      break;
    case CommBackend::kMpi:
#if STRATA_COMM_WITH_MPI
      comm = internal::CreateMpiCommunicator(options, env);
#endif
      break;
    case CommBackend::kNccl:
#if STRATA_COMM_NCCL
      comm = internal::CreateNcclCommunicator(options, env);
#endif
      break;
  }
  if (!comm.ok()) return comm.status();
  if (options.log_choice) {
    const Communicator& c = **comm;
    char timeout[32];
    std::snprintf(timeout, sizeof(timeout), "%g", options.timeout_s);
    LogInfo("comm: backend " + std::string(c.backend_name()) +
            (options.backend == CommBackend::kAuto ? " (auto)" : "") + ", rank " +
            std::to_string(c.rank()) + "/" + std::to_string(c.world_size()) + " (local " +
            std::to_string(c.local_rank()) + "/" + std::to_string(c.local_world_size()) +
            ", from " + env.source + "), timeout " + timeout + " s, size checks " +
            (options.check_sizes ? "on" : "off"));
  }
  return comm;
}

Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options) {
  STRATA_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  return CreateCommunicator(options, env);
}

}  // namespace strata
