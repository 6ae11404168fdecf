// AlignedBuffer: an owned, O_DIRECT-ready host buffer, preferably backed by transparent huge pages
// and page-locked.
//
// Why huge pages: on this class of machine a 1 MiB O_DIRECT transfer from 4 KiB pages is split by
// the virtual disk's segment limit; 2 MiB-aligned THP-backed buffers roughly doubled throughput
// (see docs/aio.md). So every I/O buffer and pinned pool in Strata comes from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

struct AlignedBufferOptions {
  // 2 MiB alignment + madvise(MADV_HUGEPAGE). Otherwise 4 KiB pages (still 4 KiB aligned).
  bool huge_pages = true;
  // mlock the pages. If the lock limit refuses, one line is logged (once per process) and the
  // buffer stays pageable; locked() tells which.
  bool lock = false;
  // Touch every page now (first touch of fresh memory is slow here: do it at start-up, not on
  // the hot path).
  bool populate = true;
};

class AlignedBuffer {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Allocates at least `size_bytes` (rounded up to the page size). OutOfMemory (cpu) on failure.
  static Result<AlignedBuffer> Allocate(size_t size_bytes,
                                        const AlignedBufferOptions& options = {});

  void* data() const { return data_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  bool locked() const { return locked_; }
  bool huge_pages_requested() const { return huge_; }

  // Bytes of this buffer currently backed by huge pages, read from /proc/self/smaps (slow: for
  // reports and tests, not hot paths). 0 if unknown.
  size_t HugePageBackedBytes() const;
  // "huge pages (2 MiB, 100% backed), locked" or "4 KiB pages, pageable".
  std::string Describe() const;

 private:
  void Release();
  void* data_ = nullptr;
  size_t size_ = 0;
  void* map_base_ = nullptr;
  size_t map_size_ = 0;
  bool locked_ = false;
  bool huge_ = false;
};

}  // namespace strata
