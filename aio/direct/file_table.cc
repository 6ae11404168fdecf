#include "aio/direct/file_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/log.h"

namespace strata {
namespace {
std::atomic<uint64_t> g_next_file_id{1};
}  // namespace

OpenFile::~OpenFile() {
  if (direct_fd >= 0) ::close(direct_fd);
  if (buffered_fd >= 0) ::close(buffered_fd);
}

Result<std::shared_ptr<OpenFile>> FileTable::Get(const std::string& path, bool for_write) {
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(path);
    if (it != files_.end() && (it->second->writable || !for_write)) return it->second;
  }
  STRATA_ASSIGN_OR_RETURN(auto f, Open(path, for_write));
  std::lock_guard lock(mu_);
  auto [it, inserted] = files_.try_emplace(path, f);
  if (!inserted) {
    if (it->second->writable || !for_write) return it->second;  // another thread won the race
    it->second = f;
  }
  return f;
}

Result<std::shared_ptr<OpenFile>> FileTable::Open(const std::string& path, bool for_write) {
  auto f = std::make_shared<OpenFile>();
  f->path = path;
  f->id = g_next_file_id++;
  int flags = O_RDWR | O_CLOEXEC | (for_write ? O_CREAT : 0);
  f->buffered_fd = ::open(path.c_str(), flags, 0644);
  if (f->buffered_fd < 0 && errno == EACCES && !for_write) {
    f->buffered_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } else if (f->buffered_fd >= 0) {
    f->writable = true;
  }
  if (f->buffered_fd < 0) return ErrnoToStatus(errno, "open " + path);
  int dflags = (f->writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_DIRECT;
  f->direct_fd = ::open(path.c_str(), dflags);
  if (f->direct_fd < 0) {
    int err = errno;
    if (err != EINVAL) return ErrnoToStatus(err, "open " + path + " with O_DIRECT");
    if (!allow_buffered_) {
      return InvalidArgumentError(
          "the filesystem holding " + path +
          " refuses O_DIRECT (EINVAL; e.g. tmpfs, some FUSE/overlay mounts). Use a directory on a "
          "local disk, or allow buffered I/O (strata.aio_allow_buffered = true, aio_bench "
          "--allow-buffered)");
    }
    static std::atomic<bool> said{false};
    LogOnce(said, LogLevel::kWarning,
            "aio: " + path + " refuses O_DIRECT, falling back to buffered I/O (page cache)");
    return f;
  }
  auto align = QueryDioAlignment(f->direct_fd, path);
  if (!align.ok()) return align.status();
  f->align = *align;
  f->split_align = std::max<uint32_t>({4096u, f->align.offset_align, f->align.mem_align});
  return f;
}

std::shared_ptr<OpenFile> FileTable::Remove(const std::string& path) {
  std::lock_guard lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return nullptr;
  auto f = std::move(it->second);
  files_.erase(it);
  return f;
}

size_t FileTable::size() const {
  std::lock_guard lock(mu_);
  return files_.size();
}

}  // namespace strata
