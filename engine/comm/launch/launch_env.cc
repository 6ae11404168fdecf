#include "engine/comm/launch/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace strata {
namespace {

using GetEnv = std::function<const char*(const char*)>;

// The variable as a non-negative int; nullopt when unset or empty.
Result<std::optional<int>> ReadInt(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::optional<int>();
  const std::string_view s(v);
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 0) {
    return InvalidArgumentError(std::string("launch environment: ") + name + "='" + v +
                                "' is not a non-negative integer");
  }
  return std::optional<int>(value);
}

struct Ranks {
  std::optional<int> rank, world, local_rank, local_world;
};

Result<Ranks> ReadRanks(const GetEnv& getenv, const char* rank, const char* world,
                        const char* local_rank, const char* local_world) {
  Ranks r;
  STRATA_ASSIGN_OR_RETURN(r.rank, ReadInt(getenv, rank));
  STRATA_ASSIGN_OR_RETURN(r.world, ReadInt(getenv, world));
  STRATA_ASSIGN_OR_RETURN(r.local_rank, ReadInt(getenv, local_rank));
  STRATA_ASSIGN_OR_RETURN(r.local_world, ReadInt(getenv, local_world));
  if (r.rank.has_value() != r.world.has_value()) {
    return InvalidArgumentError(std::string("launch environment: ") + (r.rank ? world : rank) +
                                " is not set but " + (r.rank ? rank : world) +
                                " is (a launcher sets both)");
  }
  if (r.world && (*r.world < 1 || *r.rank >= *r.world)) {
    return InvalidArgumentError(std::string("launch environment: ") + rank + "=" +
                                std::to_string(*r.rank) + " is not in [0, " + world + "=" +
                                std::to_string(*r.world) + ")");
  }
  return r;
}

}  // namespace

std::string LaunchEnv::ToString() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + "/" + std::to_string(local_world_size) + ", from " + source +
         ")";
}

Result<LaunchEnv> ReadLaunchEnv(const GetEnv& getenv) {
  STRATA_ASSIGN_OR_RETURN(
      Ranks env, ReadRanks(getenv, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  STRATA_ASSIGN_OR_RETURN(Ranks ompi,
                          ReadRanks(getenv, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (env.rank && ompi.rank && (*env.rank != *ompi.rank || *env.world != *ompi.world)) {
    return InvalidArgumentError(
        "launch environment: RANK=" + std::to_string(*env.rank) +
        " WORLD_SIZE=" + std::to_string(*env.world) +
        " disagree with OpenMPI's OMPI_COMM_WORLD_RANK=" + std::to_string(*ompi.rank) +
        " OMPI_COMM_WORLD_SIZE=" + std::to_string(*ompi.world) +
        " (a stale RANK in the environment of mpirun?)");
  }
  LaunchEnv out;
  const Ranks& primary = env.rank ? env : ompi;
  if (primary.rank) {
    out.source = env.rank ? "env" : "openmpi";
    out.rank = *primary.rank;
    out.world_size = *primary.world;
    // LOCAL_* fall back to OpenMPI's, then to "every rank on this node".
    out.local_rank = primary.local_rank.value_or(ompi.local_rank.value_or(out.rank));
    out.local_world_size = primary.local_world.value_or(ompi.local_world.value_or(out.world_size));
    if (out.local_world_size < 1 || out.local_rank >= out.local_world_size) {
      return InvalidArgumentError(
          "launch environment: LOCAL_RANK=" + std::to_string(out.local_rank) + " is not in [0, " +
          "LOCAL_WORLD_SIZE=" + std::to_string(out.local_world_size) + ")");
    }
  }
  if (const char* addr = getenv("MASTER_ADDR"); addr != nullptr) out.master_addr = addr;
  STRATA_ASSIGN_OR_RETURN(std::optional<int> port, ReadInt(getenv, "MASTER_PORT"));
  if (port) {
    if (*port < 1 || *port > 65535) {
      return InvalidArgumentError("launch environment: MASTER_PORT=" + std::to_string(*port) +
                                  " is not a port (1-65535)");
    }
    out.master_port = *port;
  }
  return out;
}

Result<LaunchEnv> ReadLaunchEnv() {
  return ReadLaunchEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace strata
