// The "nccl" backend: NCCL collectives on CUDA device buffers, bootstrapped with an ncclUniqueId
// broadcast over MPI (which also carries the size check and the health probe). Built when CMake
// finds NCCL; compiled, not run, on machines without a GPU. Internal: reached through
// CreateCommunicator (registry.h), the only caller, under `#if STRATA_WITH_NCCL`.
//
// Where collectives run: with strata.comm_check_sizes off (the release default) each one is
// enqueued directly on the caller's cudaStream_t (CudaNativeStreamOf), with no host wait, and a
// watchdog turns a hung collective into an Aborted stream error (Note [Direct collectives] in
// nccl_communicator.cc). With the size check on, the ranks first agree on the call over MPI, so
// the caller's stream reaches a host task, the progress thread issues the NCCL call on the
// communicator's own stream and the host task returns when it completes (one host wait per
// collective). Ordering and error semantics are those of Note [Collective semantics] either way.
#pragma once

#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/launch/launch_env.h"
#include "engine/comm/registry.h"

namespace strata::internal {

// InvalidArgument unless options.device_kind is kCuda; Unavailable when CUDA or NCCL fail to
// start; Aborted when not every rank joins within options.timeout_s.
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options,
                                                             const LaunchEnv& env);

}  // namespace strata::internal
