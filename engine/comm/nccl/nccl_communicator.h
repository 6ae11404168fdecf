// The "nccl" backend: NCCL collectives on CUDA device buffers, bootstrapped with an ncclUniqueId
// broadcast over MPI (which also carries the size check and the health probe). Built when CMake
// finds NCCL; compiled, not run, on machines without a GPU. Internal: reached through
// CreateCommunicator (registry.h), the only caller, under `#if STRATA_WITH_NCCL`.
//
// Note [NCCL on a Device stream]: the Device interface does not expose its cudaStream_t, so a
// collective runs on the communicator's own CUDA stream: the caller's stream reaches a host task
// (all earlier work on it is then complete), the progress thread enqueues the NCCL call on the
// internal stream and polls its event, and the host task returns when it completes. Ordering and
// error semantics are those of Note [Collective semantics]; the cost is that the caller's stream
// waits on the host for each collective. A Device hook returning the native stream would let the
// NCCL call go on the caller's stream directly.
#pragma once

#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/launch_env.h"
#include "engine/comm/registry.h"

namespace strata::internal {

// InvalidArgument unless options.device_kind is kCuda; Unavailable when CUDA or NCCL fail to
// start; Aborted when not every rank joins within options.timeout_s.
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options,
                                                             const LaunchEnv& env);

}  // namespace strata::internal
