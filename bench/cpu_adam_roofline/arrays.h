// The arrays cpu_adam_roofline runs on: fp32 master + state + fp32 grads (and 16-bit grads and
// copy for the bf16 mix), as separate THP buffers or as views carved from one shared buffer (to
// compare page sizes and to show what aliased array spacing costs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "aio/direct/aligned_buffer.h"

namespace strata::bench {

// Allocates and touches `bytes`; exits with a message on failure (a benchmark, not a library).
AlignedBuffer Alloc(size_t bytes, bool huge);

struct Arrays {
  // Separate buffers, 2 MiB-aligned on huge pages, filled with sane optimizer values.
  Arrays(size_t n, bool with_half);
  // Views into `shared`: array k starts at k * (n * 4 + stagger_bytes). Not filled.
  Arrays(size_t n, const AlignedBuffer& shared, size_t stagger_bytes);

  // The largest power of two (up to 1 GiB) dividing every pairwise distance between the fp32
  // arrays (see Note [Aliased streams] in cpu_adam/cpu_optimizer.cc).
  size_t CommonAlignment() const;

  float* P() const { return f[0]; }
  float* G() const { return f[1]; }
  float* M() const { return f[2]; }
  float* V() const { return f[3]; }
  uint16_t* G16() const { return g16; }
  uint16_t* C16() const { return c16; }

  std::vector<AlignedBuffer> owned;
  float* f[4] = {};
  uint16_t* g16 = nullptr;
  uint16_t* c16 = nullptr;

 private:
  void Fill(size_t n, bool with_half);
};

}  // namespace strata::bench
