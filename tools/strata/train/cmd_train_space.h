// `strata train`'s disk space: before the engine starts, the checkpoint directory (--save) and
// the swap directories (nvme_path) are checked for the space the run needs there, so a full disk
// is a refusal saying how much is missing rather than a failure an hour in; and a save that
// runs out of space anyway (something else filled the disk) is explained: how much a checkpoint
// needs, how much is free, and that the previous checkpoint is intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata::cli {

struct SpaceNeed {
  std::string dir;   // need not exist yet: its nearest existing parent is measured
  uint64_t bytes;    // needed there
  std::string what;  // "--save" or "nvme_path", for the message
  // Bytes already held there that the run will reuse (swap files a killed run left).
  uint64_t reusable_bytes = 0;
  // How `bytes` is made up, for the message ("7.38 MiB for each of the 2 ranks on this node").
  std::string detail;
};

// Bytes one checkpoint of a model with `num_params` parameters takes (every rank's shard: fp32
// master weights, Adam's two moments - 12 bytes a parameter - plus headers and the manifest).
uint64_t CheckpointBytes(uint64_t num_params);

// Bytes the swap files of ranks first_rank .. first_rank + ranks - 1, named
// strata-*-rank<R>.swap, hold in `dir` (a killed run's, reused by this one).
uint64_t ExistingSwapBytes(const std::string& dir, int first_rank, int ranks);

// Needs on one filesystem add up. IoError (errno ENOSPC) naming each directory, what it needs,
// what is free and what is missing, with what to do.
Status CheckDiskSpace(const std::vector<SpaceNeed>& needs);

// Free bytes (for an unprivileged user) on the filesystem holding `dir` or its nearest parent.
uint64_t FreeBytes(const std::string& dir);

// True for an error that is a full disk (ENOSPC's text, or `dir` short of `need`).
bool IsOutOfSpace(const Status& s, const std::string& dir, uint64_t need);

}  // namespace strata::cli
