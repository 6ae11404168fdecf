// BufferArena: first-fit sub-allocation of one pinned region into 4 KiB-aligned ranges.
// Used by ParamSwapper for its `buffer_count x buffer_size` swap buffers: unlike DeepSpeed,
// where every partition takes a whole buffer slot, small partitions share one buffer and a
// partition larger than `buffer_size` may span consecutive ones.
// Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "core/status.h"

namespace strata {

class BufferArena {
 public:
  BufferArena(uint8_t* base, size_t size_bytes);

  // OutOfMemory (cpu) naming asked/free/largest free range when nothing fits.
  Result<uint8_t*> Allocate(size_t size_bytes);
  void Free(uint8_t* p);

  size_t used_bytes() const { return used_; }
  size_t peak_bytes() const { return peak_; }
  size_t capacity_bytes() const { return size_; }
  size_t largest_free() const;

 private:
  uint8_t* base_;
  size_t size_;
  size_t used_ = 0, peak_ = 0;
  std::map<size_t, size_t> free_;  // offset -> size, coalesced
  std::map<size_t, size_t> live_;  // offset -> size
};

}  // namespace strata
