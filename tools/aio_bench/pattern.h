// aio_bench's data pattern. Every 4 KiB block of a file aio_bench writes starts with its own file
// offset xor a magic word: enough for a read to catch a misplaced, stale or missing block at one
// word per block, and for aio_bench to tell its own files from foreign ones (a data file, a file
// fio laid out), which it reads without verifying.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::aio_bench {

inline constexpr uint64_t kStampEvery = 4096;

// Stamps the blocks of `buf`, which is to be written at `file_offset`.
void Stamp(uint8_t* buf, uint64_t size_bytes, uint64_t file_offset);

// OK if every block of `buf`, read from `file` at `file_offset`, holds its stamp; else DataLoss
// naming the file and the offset of the first block that does not.
Status CheckStamps(const uint8_t* buf, uint64_t size_bytes, uint64_t file_offset,
                   const std::string& file);

// Whether `file` holds aio_bench's pattern: reads up to kProbeBlocks blocks spread evenly over its
// first `size_bytes` (outside any timing) and says if any of them holds its stamp. A file
// aio_bench wrote and that was damaged in places still counts as aio_bench's, so a verifying read
// reports the damage as DataLoss; a file with no stamp among the probes is foreign. NotFound or
// IoError if the file cannot be read.
inline constexpr int kProbeBlocks = 64;
Result<bool> HoldsPattern(const std::string& file, uint64_t size_bytes);

}  // namespace strata::aio_bench
