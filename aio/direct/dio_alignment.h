// What O_DIRECT requires of a file: buffer address alignment and file offset/length alignment.
// Read from statx(STATX_DIOALIGN) where the kernel reports it, else from the logical block size
// of the block device under the file (sysfs), else from st_blksize - never a hard-coded guess.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

struct DioAlignment {
  uint32_t mem_align = 0;     // buffer address must be a multiple of this
  uint32_t offset_align = 0;  // file offset and length must be multiples of this
  std::string source;         // "statx", "sysfs logical_block_size" or "st_blksize"
};

// `fd` is an open descriptor of `path` (used in messages only).
Result<DioAlignment> QueryDioAlignment(int fd, const std::string& path);

}  // namespace strata
