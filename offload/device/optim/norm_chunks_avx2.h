// The two bodies of SquaredNormChunkSums (offload/device/optim/optimizer_kernels.h): AVX2, for
// callers that checked the CPU has it at run time, and portable. Same bits (Note [Squared-norm
// order]).
#pragma once

#include <cstddef>

namespace strata::internal {

// kSquaredNormChunk (optimizer_kernels.cc checks they agree): the AVX2 file includes no project
// header with inline functions.
inline constexpr size_t kNormChunkAvx2 = 4096;

// partials[c] for the first chunks of x, in groups of 8 whole chunks of kNormChunkAvx2: sums
// as many groups as `full_chunks` holds and returns how many chunks it did (a multiple of 8).
size_t SquaredNormChunkSumsAvx2(const float* x, size_t full_chunks, double* partials);

// The portable body (optimizer_kernels.cc), for any CPU: SquaredNormChunkSums runs it on what the
// AVX2 body leaves, or on everything without AVX2. Tests call both bodies directly.
void SquaredNormChunkSumsScalar(const float* x, size_t numel, double* partials);

}  // namespace strata::internal
