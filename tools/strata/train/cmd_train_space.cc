// strata train's disk-space checks (cmd_train_space.h).
#include "tools/strata/train/cmd_train_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "core/units.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

// The directory itself, or its nearest existing parent.
fs::path Existing(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  return p.empty() ? fs::path(".") : p;
}

}  // namespace

uint64_t CheckpointBytes(uint64_t num_params) { return 12 * num_params + (uint64_t{1} << 20); }

uint64_t ExistingSwapBytes(const std::string& dir, int first_rank, int ranks) {
  uint64_t total = 0;
  std::error_code ec;
  const auto of_ranks = [&](const std::string& name) {
    for (int r = first_rank; r < first_rank + ranks; ++r) {
      if (name.ends_with("-rank" + std::to_string(r) + ".swap")) return true;
    }
    return false;
  };
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("strata-") || !of_ranks(name)) continue;
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs v;
  if (::statvfs(Existing(dir).c_str(), &v) != 0) return UINT64_MAX;  // unknown: do not refuse
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

Status CheckDiskSpace(const std::vector<SpaceNeed>& needs) {
  struct Fs {
    uint64_t need = 0, reusable = 0;
    std::string dirs;
    std::string first, first_what, first_detail;
    int count = 0;
  };
  std::map<dev_t, Fs> by_fs;
  for (const SpaceNeed& n : needs) {
    if (n.bytes == 0) continue;
    struct stat st;
    if (::stat(Existing(n.dir).c_str(), &st) != 0) continue;
    Fs& f = by_fs[st.st_dev];
    f.need += n.bytes;
    f.reusable += n.reusable_bytes;
    const std::string detail = n.detail.empty() ? "" : ": " + n.detail;
    f.dirs += (f.dirs.empty() ? "" : " and ") + n.what + " " + n.dir + " (" + FormatBytes(n.bytes) +
              detail + ")";
    if (f.count++ == 0) {
      f.first = n.dir;
      f.first_what = n.what;
      f.first_detail = n.detail.empty() ? "" : " (" + n.detail + ")";
    }
  }
  std::string errors;
  for (const auto& [dev, f] : by_fs) {
    const uint64_t free = FreeBytes(f.first);
    const uint64_t have = free == UINT64_MAX ? free : free + f.reusable;
    if (have >= f.need) continue;
    const std::string needs_text =
        f.count == 1
            ? f.first_what + " " + f.first + " needs " + FormatBytes(f.need) + f.first_detail
            : f.dirs + " need " + FormatBytes(f.need) + " together";
    errors += (errors.empty() ? "" : "; ") + std::string("not enough disk space: ") + needs_text +
              "; the filesystem has " + FormatBytes(have) + " free: " + FormatBytes(f.need - have) +
              " missing; free that much there or give a directory on a larger disk";
  }
  if (errors.empty()) return Status::Ok();
  return Status(StatusCode::kIoError, errors, ENOSPC);
}

bool IsOutOfSpace(const Status& s, const std::string& dir, uint64_t need) {
  return s.message().find(std::strerror(ENOSPC)) != std::string::npos || FreeBytes(dir) < need;
}

}  // namespace strata::cli
