// The two references cpu_adam_roofline measures Strata's CPU Adam against, both compiled
// -O3 -march=native -fno-math-errno (streams.cc only):
//  - probes: Adam's exact memory streams with no arithmetic (the memory ceiling);
//  - a plain Adam loop, the way anyone would write it, left to the compiler's vectoriser.
// Each function processes one contiguous chunk; the caller splits the array across threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::bench {

// Reads p, g, m, v and writes p, m, v back in place (unchanged values, but the compiler cannot
// know it). 28 bytes per element. `n` is rounded down to a multiple of 8.
void ProbeFp32(float* p, const float* g, float* m, float* v, size_t n);

// The half-precision mix: reads p, m, v (fp32) and g (16-bit), writes p, m, v in place and a
// 16-bit copy to a separate array. 28 bytes per element (+2 for the copy's write-allocate).
void ProbeHalfMix(float* p, const uint16_t* g, float* m, float* v, uint16_t* copy, size_t n);

// Other ways to move the same 28 bytes per element, to test whether ProbeFp32 really is the
// ceiling (a kernel could only beat a plain loop at the probe by moving the bytes faster):
//  - non-temporal (streaming) stores for p, m, v;
//  - tiles of `kProbeTile` elements, the next tile prefetched into L2 one array at a time
//    (sequential bursts instead of four interleaved streams);
//  - the state interleaved in blocks [p x16 | m x16 | v x16] (one read-write stream and one read
//    stream instead of 4 + 3): `state` holds 3 * n floats, block b covers elements 16b..16b+15.
// `n` is rounded down to a multiple of 16. The streaming probe needs p, m, v 32-byte aligned
// (vmovntps faults otherwise); the bench's arrays and chunk boundaries are.
inline constexpr size_t kProbeTile = 8192;
void ProbeFp32Streaming(float* p, const float* g, float* m, float* v, size_t n);
void ProbeFp32TilePrefetch(float* p, const float* g, float* m, float* v, size_t n);
void ProbeInterleavedState(float* state, const float* g, size_t n);

struct PlainAdamArgs {
  float beta1, beta2, eps;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_rsqrt;  // 1 / sqrt(1 - beta2^t)
  float decay;      // 1 - lr * weight_decay (AdamW)
};

// The per-step scalars of AdamW step `step` (>= 1), computed in double and rounded once.
PlainAdamArgs MakePlainAdamArgs(float lr, float beta1, float beta2, float eps, float weight_decay,
                                int64_t step, bool bias_correction);

// for each i: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//             p = p * decay - step_size * m / (sqrt(v) * bc2_rsqrt + eps)
void PlainAdamFp32(float* __restrict p, const float* __restrict g, float* __restrict m,
                   float* __restrict v, size_t n, const PlainAdamArgs& a);

}  // namespace strata::bench
