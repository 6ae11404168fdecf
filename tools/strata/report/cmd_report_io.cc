// The io section of `strata report`: io_uring (refused or not, and its features), libaio, and
// what O_DIRECT needs at the checked path.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "aio/direct/aligned_buffer.h"
#include "aio/direct/dio_alignment.h"
#include "aio/engine/io_engine.h"
#include "core/units.h"
#include "tools/strata/report/cmd_report_checks.h"

namespace strata::cli {
namespace {

std::string ReadFirstLineOf(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

void AddIoUringChecks(std::vector<CheckResult>* out) {
  std::string disabled = ReadFirstLineOf("/proc/sys/kernel/io_uring_disabled");
  IoEngineOptions opts;
  Result<std::unique_ptr<IoEngine>> ring = CreateIoEngine(IoEngineKind::kIoUring, opts);
  if (!ring.ok()) {
    out->push_back({"io",
                    "io_uring",
                    CheckLevel::kMissing,
                    "refused: " + ring.status().message() +
                        (disabled.empty() ? "" : " (kernel.io_uring_disabled = " + disabled + ")"),
                    "Strata uses libaio instead with `\"strata\": {\"aio_engine\": \"auto\"}` or "
                    "\"libaio\"; to allow io_uring: sysctl kernel.io_uring_disabled=0, or a "
                    "container seccomp profile that permits it",
                    {{"available", false}}});
    return;
  }
  out->push_back({"io",
                  "io_uring",
                  CheckLevel::kOk,
                  (*ring)->Describe(),
                  "",
                  {{"available", true}, {"describe", (*ring)->Describe()}}});

  Result<AlignedBuffer> buf = AlignedBuffer::Allocate(size_t{1} << 20);
  Status reg = buf.ok() ? (*ring)->RegisterBuffer(buf->bytes(), size_t{1} << 20) : buf.status();
  if (reg.ok()) (*ring)->UnregisterBuffer(buf->bytes()).IgnoreError();
  out->push_back({"io",
                  "io_uring registered buffers",
                  reg.ok() ? CheckLevel::kOk : CheckLevel::kWarning,
                  reg.ok() ? "work (reads skip per-request page pinning)" : reg.message(),
                  reg.ok() ? ""
                           : "reads are slower without them; check ulimit -l (they count as "
                             "locked memory)",
                  {{"available", reg.ok()}}});

  IoEngineOptions sq = opts;
  sq.sqpoll = true;
  Result<std::unique_ptr<IoEngine>> sqpoll = CreateIoEngine(IoEngineKind::kIoUring, sq);
  out->push_back({"io",
                  "io_uring SQPOLL",
                  sqpoll.ok() ? CheckLevel::kOk : CheckLevel::kWarning,
                  sqpoll.ok() ? "available (off by default: its kernel thread takes a whole core; "
                                "\"strata\": {\"aio_sqpoll\": true} turns it on)"
                              : "not available: " + sqpoll.status().message(),
                  sqpoll.ok() ? "" : "nothing to do: Strata does not need it",
                  {{"available", sqpoll.ok()}}});
}

void AddLibaioCheck(std::vector<CheckResult>* out) {
  Result<std::unique_ptr<IoEngine>> aio = CreateIoEngine(IoEngineKind::kLibaio, {});
  out->push_back({"io",
                  "libaio",
                  aio.ok() ? CheckLevel::kOk : CheckLevel::kMissing,
                  aio.ok() ? (*aio)->Describe() : aio.status().message(),
                  aio.ok() ? "" : "check /proc/sys/fs/aio-max-nr",
                  {{"available", aio.ok()}}});
}

const char* FsName(long type) {
  switch (type) {
    case EXT4_SUPER_MAGIC:
      return "ext4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case TMPFS_MAGIC:
      return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlayfs";
    case NFS_SUPER_MAGIC:
      return "nfs";
    default:
      return "other";
  }
}

// Logical and physical block size of the block device under `st_dev`, from sysfs (a partition's
// queue/ is its parent's). 0 when unknown.
void BlockSizes(dev_t dev, uint64_t* logical, uint64_t* physical) {
  std::string base =
      "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  for (const std::string& q : {base + "/queue/", base + "/../queue/"}) {
    std::string l = ReadFirstLineOf(q + "logical_block_size");
    std::string p = ReadFirstLineOf(q + "physical_block_size");
    if (!l.empty() && !p.empty()) {
      *logical = std::strtoull(l.c_str(), nullptr, 10);
      *physical = std::strtoull(p.c_str(), nullptr, 10);
      return;
    }
  }
}

void AddPathChecks(const ReportOptions& options, std::vector<CheckResult>* out) {
  const std::string& dir = options.path;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    out->push_back({"io",
                    "O_DIRECT",
                    CheckLevel::kMissing,
                    dir + " is not a directory: " + std::strerror(errno),
                    "pass an existing directory with --path (where nvme_path will point)",
                    {}});
    return;
  }
  struct statfs sfs {};
  statfs(dir.c_str(), &sfs);
  uint64_t logical = 0, physical = 0;
  BlockSizes(st.st_dev, &logical, &physical);

  std::string probe = (std::filesystem::path(dir) / ".strata-report-probe").string();
  int fd = open(probe.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  nlohmann::json data = {{"filesystem", FsName(sfs.f_type)},
                         {"logical_block_bytes", logical},
                         {"physical_block_bytes", physical}};
  if (fd < 0) {
    int err = errno;
    out->push_back(
        {"io", "O_DIRECT", CheckLevel::kWarning,
         dir + ": refused by the filesystem (" + FsName(sfs.f_type) + "): " + std::strerror(err),
         "put nvme_path on ext4 or xfs on a local drive; otherwise Strata refuses "
         "unless \"strata\": {\"aio_allow_buffered\": true} (page cache, slower)",
         data});
  } else {
    Result<DioAlignment> align = QueryDioAlignment(fd, probe);
    Result<AlignedBuffer> buf = AlignedBuffer::Allocate(4096);
    bool io_ok = false;
    std::string io_err;
    if (buf.ok()) {
      std::memset(buf->bytes(), 0x5a, 4096);
      ssize_t w = pwrite(fd, buf->bytes(), 4096, 0);
      ssize_t r = w == 4096 ? pread(fd, buf->bytes(), 4096, 0) : -1;
      io_ok = r == 4096;
      if (!io_ok) io_err = std::strerror(errno);
    }
    close(fd);
    std::string detail = dir + ": " + FsName(sfs.f_type) + ", block device logical " +
                         std::to_string(logical) + " B / physical " + std::to_string(physical) +
                         " B";
    if (align.ok()) {
      detail += "; O_DIRECT needs buffers aligned to " + std::to_string(align->mem_align) +
                " B and offsets/lengths to " + std::to_string(align->offset_align) + " B (from " +
                align->source + ")";
      data["dio_mem_align"] = align->mem_align;
      data["dio_offset_align"] = align->offset_align;
    }
    out->push_back({"io", "O_DIRECT", io_ok ? CheckLevel::kOk : CheckLevel::kWarning,
                    io_ok ? detail : detail + "; a 4 KiB O_DIRECT write/read failed: " + io_err,
                    io_ok ? "" : "check the filesystem and permissions at --path", data});
  }
  unlink(probe.c_str());

  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0) {
    uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    uint64_t total = uint64_t{vfs.f_blocks} * vfs.f_frsize;
    const bool low = free_bytes < (uint64_t{10} << 30);
    out->push_back({"io",
                    "free space",
                    low ? CheckLevel::kWarning : CheckLevel::kOk,
                    dir + ": " + FormatBytes(free_bytes) + " free of " + FormatBytes(total),
                    low ? "NVMe offload needs ~12-16 B per parameter: `strata estimate` says how "
                          "much for a model"
                        : "",
                    {{"free_bytes", free_bytes}, {"total_bytes", total}}});
  }
}

}  // namespace

void AddIoChecks(const ReportOptions& options, std::vector<CheckResult>* out) {
  AddIoUringChecks(out);
  AddLibaioCheck(out);
  AddPathChecks(options, out);
}

}  // namespace strata::cli
