// Uses the raw statx syscall with the kernel's struct (glibc 2.36's struct statx predates the
// stx_dio_* fields), so this file includes <linux/stat.h> and not <sys/stat.h>.
#include "aio/direct/dio_alignment.h"

#include <fcntl.h>
#include <linux/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace strata {
namespace {

uint32_t ReadSysfsU32(const std::string& file) {
  std::ifstream in(file);
  uint32_t v = 0;
  if (in >> v) return v;
  return 0;
}

}  // namespace

Result<DioAlignment> QueryDioAlignment(int fd, const std::string& path) {
  struct statx stx {};
  long rc = syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN | STATX_BASIC_STATS, &stx);
  if (rc != 0) return ErrnoToStatus(errno, "statx " + path);
  DioAlignment a;
  if ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_mem_align && stx.stx_dio_offset_align) {
    a.mem_align = stx.stx_dio_mem_align;
    a.offset_align = stx.stx_dio_offset_align;
    a.source = "statx";
    return a;
  }
  std::string dev = "/sys/dev/block/" + std::to_string(stx.stx_dev_major) + ":" +
                    std::to_string(stx.stx_dev_minor);
  uint32_t lbs = ReadSysfsU32(dev + "/queue/logical_block_size");
  if (lbs == 0) lbs = ReadSysfsU32(dev + "/../queue/logical_block_size");  // a partition
  if (lbs != 0) {
    a.mem_align = a.offset_align = lbs;
    a.source = "sysfs logical_block_size";
    return a;
  }
  if (stx.stx_blksize != 0) {
    a.mem_align = a.offset_align = stx.stx_blksize;
    a.source = "st_blksize";
    return a;
  }
  return UnavailableError("cannot tell the O_DIRECT alignment of " + path +
                          " (no STATX_DIOALIGN, no sysfs block size, no st_blksize)");
}

}  // namespace strata
