// CreateCommunicator: the one factory for Communicator backends, and the options the config layer
// fills (`strata.comm_backend`, `strata.comm_timeout_s`, `strata.comm_check_sizes`).
//
// Backends: "local" (world 1: copies on the stream), "mpi" (OpenMPI, host-accessible buffers;
// device memory that is not is staged through host memory), "nccl" (CUDA device buffers; built
// when CMake finds NCCL, bootstrapped over MPI). "auto" picks local for a process started without
// a launcher (world 1), else nccl on a CUDA device and mpi otherwise. The choice is logged once
// at creation: "comm: backend mpi, rank 0/3 (local 0/3, from openmpi), timeout 300 s".
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/comm/communicator.h"
#include "engine/comm/launch/launch_env.h"
#include "offload/device/api/device.h"

namespace strata {

enum class CommBackend : uint8_t { kAuto, kLocal, kMpi, kNccl };

// "auto", "local", "mpi", "nccl".
std::string_view CommBackendName(CommBackend backend);
// InvalidArgument naming the allowed values for anything else.
Result<CommBackend> ParseCommBackend(std::string_view text);

struct CommOptions {
  CommBackend backend = CommBackend::kAuto;  // strata.comm_backend
  // The device whose streams and memory the collectives use (auto's nccl-or-mpi choice).
  DeviceKind device_kind = DeviceKind::kHost;
  // CUDA ordinal for nccl; -1 = the local rank (devices renumbered by CUDA_VISIBLE_DEVICES).
  int device_ordinal = -1;
  // strata.comm_timeout_s: a collective that makes no progress this long after this rank reached
  // it fails on every rank that waits, naming the ranks that did not arrive.
  double timeout_s = 300;
  // strata.comm_check_sizes: every collective first compares (kind, dtype, numel, root, op)
  // across ranks and fails with the ranks that differ, instead of corrupting or hanging. Costs
  // one small all-gather per collective. On by default in debug builds (no NDEBUG).
#ifdef NDEBUG
  bool check_sizes = false;
#else
  bool check_sizes = true;
#endif
  // Log the backend line at creation.
  bool log_choice = true;
};

// The backends compiled into this build ("local" always).
std::vector<CommBackend> BuiltCommBackends();

// Reads the launch environment (launch/launch_env.h) and creates the world communicator.
// Unavailable for a backend not built; InvalidArgument for a bad environment or options.
Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options);
// The same with the launch environment given (tests).
Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options,
                                                         const LaunchEnv& env);

}  // namespace strata
