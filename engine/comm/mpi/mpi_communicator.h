// The "mpi" backend: OpenMPI non-blocking collectives (MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) driven by a CollectiveQueue progress thread, on
// host-accessible buffers (HostDevice memory directly; other device memory staged through host
// memory on the stream). Internal: reached through CreateCommunicator (registry.h).
#pragma once

#include <memory>

#include "engine/comm/communicator.h"
#include "engine/comm/launch/launch_env.h"
#include "engine/comm/registry.h"

namespace strata::internal {

// The world communicator over MPI_COMM_WORLD (MPI initialised on first use). InvalidArgument when
// the launch environment's world disagrees with MPI's (e.g. RANK/WORLD_SIZE set but the program
// was not started by mpirun); Aborted when not every rank arrives within options.timeout_s.
Result<std::unique_ptr<Communicator>> CreateMpiCommunicator(const CommOptions& options,
                                                            const LaunchEnv& env);

}  // namespace strata::internal
