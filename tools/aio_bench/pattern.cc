#include "tools/aio_bench/pattern.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace strata::aio_bench {
namespace {

constexpr uint64_t kMagic = 0x5354524154414231ull;  // "STRATAB1"

uint64_t StampAt(uint64_t offset) { return offset ^ kMagic; }

}  // namespace

void Stamp(uint8_t* buf, uint64_t size_bytes, uint64_t file_offset) {
  for (uint64_t b = 0; b + sizeof(uint64_t) <= size_bytes; b += kStampEvery) {
    const uint64_t v = StampAt(file_offset + b);
    std::memcpy(buf + b, &v, sizeof v);
  }
}

Status CheckStamps(const uint8_t* buf, uint64_t size_bytes, uint64_t file_offset,
                   const std::string& file) {
  for (uint64_t b = 0; b + sizeof(uint64_t) <= size_bytes; b += kStampEvery) {
    uint64_t v;
    std::memcpy(&v, buf + b, sizeof v);
    if (v != StampAt(file_offset + b)) {
      return DataLossError("verify " + file + ": block at offset " +
                           std::to_string(file_offset + b) + " holds the wrong data");
    }
  }
  return Status::Ok();
}

Result<bool> HoldsPattern(const std::string& file, uint64_t size_bytes) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + file + " to look for aio_bench's pattern");
  const uint64_t blocks = size_bytes / kStampEvery;
  const uint64_t probes = std::min<uint64_t>(blocks, kProbeBlocks);
  bool found = false;
  Status status;
  for (uint64_t i = 0; i < probes && !found; ++i) {
    // Evenly spread, the first and the last block included.
    const uint64_t block = probes == 1 ? 0 : i * (blocks - 1) / (probes - 1);
    const uint64_t offset = block * kStampEvery;
    uint64_t v;
    const ssize_t n = pread(fd, &v, sizeof v, static_cast<off_t>(offset));
    if (n < 0) {
      status = ErrnoToStatus(errno, "read " + file + " @ " + std::to_string(offset));
      break;
    }
    found = n == sizeof v && v == StampAt(offset);
  }
  // The probes went through the page cache; drop it so it holds nothing of the file.
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (!status.ok()) return status;
  return found;
}

}  // namespace strata::aio_bench
