#include "aio/direct/aligned_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/log.h"
#include "core/units.h"

namespace strata {
namespace {

size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::atomic<bool> g_lock_warned{false};

}  // namespace

AlignedBuffer::~AlignedBuffer() { Release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_base_(std::exchange(o.map_base_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      locked_(std::exchange(o.locked_, false)),
      huge_(std::exchange(o.huge_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_base_ = std::exchange(o.map_base_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    locked_ = std::exchange(o.locked_, false);
    huge_ = std::exchange(o.huge_, false);
  }
  return *this;
}

void AlignedBuffer::Release() {
  if (map_base_ != nullptr) {
    if (locked_) munlock(data_, size_);
    munmap(map_base_, map_size_);
  }
  data_ = map_base_ = nullptr;
  size_ = map_size_ = 0;
  locked_ = false;
}

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t size_bytes,
                                              const AlignedBufferOptions& options) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t align = options.huge_pages ? kHugePageBytes : page;
  const size_t size = RoundUp(size_bytes == 0 ? 1 : size_bytes, options.huge_pages ? align : page);
  const size_t map_size = size + (options.huge_pages ? align : 0);
  void* base = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return OutOfMemoryError("cpu: cannot map " + FormatBytes(size) +
                            " for an aligned buffer: " + std::strerror(errno));
  }
  AlignedBuffer buf;
  buf.map_base_ = base;
  buf.map_size_ = map_size;
  auto addr = reinterpret_cast<uintptr_t>(base);
  buf.data_ = reinterpret_cast<void*>(RoundUp(addr, align));
  buf.size_ = size;
  buf.huge_ = options.huge_pages;
  if (options.huge_pages) {
    // Trim the unaligned head and tail so the mapping is exactly the aligned range.
    auto head = reinterpret_cast<uintptr_t>(buf.data_) - addr;
    if (head) munmap(base, head);
    size_t tail = map_size - head - size;
    if (tail) munmap(static_cast<uint8_t*>(buf.data_) + size, tail);
    buf.map_base_ = buf.data_;
    buf.map_size_ = size;
    if (madvise(buf.data_, size, MADV_HUGEPAGE) != 0) {
      static std::atomic<bool> warned{false};
      LogOnce(warned, LogLevel::kWarning,
              std::string("madvise(MADV_HUGEPAGE) failed (") + std::strerror(errno) +
                  "): I/O buffers use 4 KiB pages, O_DIRECT throughput may halve");
    }
  }
  if (options.populate) {
    // One write per 4 KiB page faults in a huge page per 2 MiB when THP is granted.
    for (size_t off = 0; off < size; off += page) buf.bytes()[off] = 0;
  }
  if (options.lock) {
    if (mlock(buf.data_, size) == 0) {
      buf.locked_ = true;
    } else {
      LogOnce(g_lock_warned, LogLevel::kWarning,
              "mlock of " + FormatBytes(size) + " failed (" + std::strerror(errno) +
                  "; raise 'ulimit -l' or grant CAP_IPC_LOCK): falling back to pageable memory");
    }
  }
  return buf;
}

size_t AlignedBuffer::HugePageBackedBytes() const {
  if (data_ == nullptr) return 0;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  auto lo = reinterpret_cast<uintptr_t>(data_);
  auto hi = lo + size_;
  size_t total = 0;
  bool in_range = false;
  while (std::getline(smaps, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      in_range = a < hi && b > lo;
      continue;
    }
    if (in_range && line.rfind("AnonHugePages:", 0) == 0) {
      unsigned long kb = 0;
      std::sscanf(line.c_str() + 14, "%lu", &kb);
      total += kb * 1024;
    }
  }
  return total;
}

std::string AlignedBuffer::Describe() const {
  std::string s;
  if (huge_) {
    size_t backed = HugePageBackedBytes();
    int pct = size_ ? static_cast<int>(100.0 * static_cast<double>(backed) / size_ + 0.5) : 0;
    s = "2 MiB-aligned, transparent huge pages (" + std::to_string(pct) + "% backed)";
  } else {
    s = "4 KiB pages";
  }
  s += locked_ ? ", locked" : ", pageable";
  return s;
}

}  // namespace strata
