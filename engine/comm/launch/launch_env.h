// LaunchEnv: who this process is in a multi-process job, read from the environment a launcher
// sets — `strata launch` and DeepSpeed/torchrun style launchers (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or plain OpenMPI `mpirun` (OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE). A program started
// without a launcher is world 1.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace strata {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty when not set
  int master_port = 0;      // 0 when not set
  // Where the ranks came from: "none" (no launcher), "env" (RANK/WORLD_SIZE) or "openmpi".
  std::string source = "none";

  bool launched() const { return source != "none"; }
  // "rank 1/3 (local 1/3, from env)".
  std::string ToString() const;
};

// Reads the variables through `getenv` (tests pass a map). InvalidArgument naming the variable
// for a value that is not a number, out of range (RANK >= WORLD_SIZE, ...), only half of a pair,
// or when RANK/WORLD_SIZE and OpenMPI's own disagree.
Result<LaunchEnv> ReadLaunchEnv(const std::function<const char*(const char*)>& getenv);
// The same on this process's environment.
Result<LaunchEnv> ReadLaunchEnv();

}  // namespace strata
