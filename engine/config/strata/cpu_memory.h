// strata.cpu_memory: the CPU memory (pinned + pageable) one rank plans within. Bytes ("6G"), or
// "auto": kCpuMemoryAutoShare of the RAM available at start-up (MemAvailable in /proc/meminfo)
// divided among the ranks the launcher put on this node (LOCAL_WORLD_SIZE or
// OMPI_COMM_WORLD_LOCAL_SIZE; 1 without a launcher), so each rank leaves the others their share.
// Read with the `strata` section; the origin of "auto" says what it resolved to and from what.
// The engine plans within it (engine/plan/cpu_budget.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/config/reader/section_reader.h"

namespace strata {

// The share of MemAvailable "auto" gives the node's ranks (the rest: the page cache the swap
// files' buffered metadata, the OS, other processes started later).
inline constexpr double kCpuMemoryAutoShare = 0.8;

// share x mem_available / local_ranks (local_ranks >= 1), in bytes.
uint64_t AutoCpuMemoryBytes(uint64_t mem_available_bytes, int local_ranks);

// MemAvailable of /proc/meminfo in bytes; NotFound when the kernel does not report it.
Result<uint64_t> MemAvailableBytes();

namespace internal {
// Reads strata.cpu_memory into `*out` (0 = no budget): bytes, a size string, or "auto".
void ReadCpuMemory(const Section& strata, uint64_t* out);
}  // namespace internal

}  // namespace strata
