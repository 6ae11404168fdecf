// Where aio_bench measures, checked before any I/O: the directory or file exists and is usable,
// there is room for what it will write, and a file to be read holds enough bytes. Every refusal
// says what is true, including the space aio_bench leaves free.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata::aio_bench {

// aio_bench leaves this much free on the filesystem it writes to (so a run never fills a disk
// that something else is using); refusals name it.
inline constexpr uint64_t kFreeSpaceReserve = uint64_t{64} << 20;

// OK if `dir`, with `free_bytes` available, can take `need_bytes` more while keeping
// kFreeSpaceReserve free; else FailedPrecondition saying both figures and the reserve, and the
// largest --file-size that would fit.
Status CheckFreeSpace(const std::string& dir, uint64_t free_bytes, uint64_t need_bytes);

struct Target {
  std::string file;             // the file measured
  bool own_file = false;        // aio_bench's scratch file (--path): laid out, then removed
  uint64_t existing_bytes = 0;  // the size of `file` now (0 if it does not exist)
};

// Checks the target of a run and names its file. `path` (a directory) or `file` is given, not
// both. `writes` says if the run writes (--op write or both), `reads` if it reads; `file_size`
// is the bytes per point.
Result<Target> PrepareTarget(const std::string& path, const std::string& file, bool writes,
                             bool reads, uint64_t file_size);

}  // namespace strata::aio_bench
