#include "tools/aio_bench/target.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include "core/units.h"

namespace strata::aio_bench {
namespace {

std::string DirOf(const std::string& file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string::npos) return ".";
  return file.substr(0, slash == 0 ? 1 : slash);
}

Status CheckWritableDir(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "directory " + dir);
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError(dir + " is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoToStatus(errno, "directory " + dir + " is not writable");
  }
  return Status::Ok();
}

Status CheckRoom(const std::string& dir, uint64_t need_bytes) {
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0) return ErrnoToStatus(errno, "statvfs " + dir);
  return CheckFreeSpace(dir, static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize, need_bytes);
}

}  // namespace

Status CheckFreeSpace(const std::string& dir, uint64_t free_bytes, uint64_t need_bytes) {
  if (free_bytes >= need_bytes && free_bytes - need_bytes >= kFreeSpaceReserve) {
    return Status::Ok();
  }
  std::string m = dir + " has " + FormatBytes(free_bytes) + " free; the run writes " +
                  FormatBytes(need_bytes) + " and aio_bench leaves " +
                  FormatBytes(kFreeSpaceReserve) + " free";
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  if (free_bytes >= kFreeSpaceReserve + kMiB) {
    const uint64_t fit_mib = (free_bytes - kFreeSpaceReserve) / kMiB;
    m += " (lower --file-size to " + std::to_string(fit_mib) + "M or less)";
  } else {
    m += " (free some space or use another directory)";
  }
  return FailedPreconditionError(m);
}

Result<Target> PrepareTarget(const std::string& path, const std::string& file, bool writes,
                             bool reads, uint64_t file_size) {
  Target t;
  if (!path.empty()) {
    STRATA_RETURN_IF_ERROR(CheckWritableDir(path));
    STRATA_RETURN_IF_ERROR(CheckRoom(path, file_size));
    t.file = path + "/aio_bench." + std::to_string(getpid()) + ".dat";
    t.own_file = true;
    return t;
  }
  t.file = file;
  struct stat st;
  const bool exists = stat(file.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return ErrnoToStatus(errno, "stat " + file);
  if (exists && !S_ISREG(st.st_mode)) {
    return InvalidArgumentError(file +
                                " is not a regular file (--file wants a file; --path a "
                                "directory)");
  }
  t.existing_bytes = exists ? static_cast<uint64_t>(st.st_size) : 0;
  if (writes) {
    if (exists) {
      if (access(file.c_str(), W_OK) != 0) {
        return ErrnoToStatus(errno, file + " is not writable (--op " +
                                        std::string(reads ? "both" : "write") + " writes it)");
      }
    } else {
      STRATA_RETURN_IF_ERROR(CheckWritableDir(DirOf(file)));
    }
    if (file_size > t.existing_bytes) {
      STRATA_RETURN_IF_ERROR(CheckRoom(DirOf(file), file_size - t.existing_bytes));
    }
    return t;
  }
  // Reads only: the file must exist and hold what is read.
  if (!exists) {
    return NotFoundError(file +
                         " does not exist; --op read reads an existing file (write it "
                         "first with --op write, or use --path DIR, which lays one out)");
  }
  if (access(file.c_str(), R_OK) != 0) return ErrnoToStatus(errno, file + " is not readable");
  if (t.existing_bytes < file_size) {
    return FailedPreconditionError(file + " holds " + FormatBytes(t.existing_bytes) +
                                   "; --op read with --file-size " + FormatBytes(file_size) +
                                   " reads that many bytes (lower --file-size)");
  }
  return t;
}

}  // namespace strata::aio_bench
