// FileTable: the files an AioHandle has open, opened once and kept open (DeepSpeed re-opens the
// file for every tensor). Each file has an O_DIRECT descriptor (when the filesystem allows it)
// and a buffered one used for unaligned heads and tails.
//
// Thread-safe. OpenFile objects are shared: in-flight I/O keeps its file open after Close().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "aio/direct/dio_alignment.h"
#include "core/status.h"

namespace strata {

struct OpenFile {
  ~OpenFile();
  std::string path;
  uint64_t id = 0;       // unique per open, never reused
  int direct_fd = -1;    // O_DIRECT descriptor, -1 when the filesystem refuses O_DIRECT
  int buffered_fd = -1;  // always open
  bool writable = false;
  DioAlignment align;  // valid when direct_fd >= 0
  // Granularity at which requests are split between O_DIRECT and buffered I/O: a multiple of
  // the page size so a buffered edge never shares a page-cache page with a direct range.
  uint32_t split_align = 4096;
};

class FileTable {
 public:
  // allow_buffered: a filesystem that refuses O_DIRECT gets buffered I/O (one line is logged)
  // instead of an error.
  explicit FileTable(bool allow_buffered) : allow_buffered_(allow_buffered) {}

  // The open file for `path`. for_write creates it if missing. A read of a missing file is
  // NotFound. Errors name the path and the errno text.
  Result<std::shared_ptr<OpenFile>> Get(const std::string& path, bool for_write);

  // Drops the cached entry (its descriptors close when the last in-flight I/O finishes).
  // Returns the removed file, or nullptr if it was not open.
  std::shared_ptr<OpenFile> Remove(const std::string& path);

  size_t size() const;

 private:
  Result<std::shared_ptr<OpenFile>> Open(const std::string& path, bool for_write);

  bool allow_buffered_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<OpenFile>> files_;
};

}  // namespace strata
