#include "offload/device/host/streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace strata::internal {

// Note [Streaming copies]
// On a GPU the link copies are DMA: they do not pass through the CPU's caches. On the host
// device they are memcpy on the stream's thread, and glibc's memcpy stores through the cache
// below its non-temporal threshold (three quarters of the shared cache, tens of MB on a server
// CPU), so every gathered shard and every gradient crossing "the link" (1-17 MB each, ~390 MB a
// step in bench/overlap's balanced size) first read each destination line for ownership and then
// evicted the compute kernels' working set from the shared L3 while they ran on the other core.
// Above kStreamingCopyMinBytes the copy uses streaming stores (SSE2, part of x86-64: no run-time
// dispatch), which skip both; the bytes are the same. Alternating runs of bench/overlap's balanced
// size (9 rounds each), the overlapped step against its bound: 1.10-1.13 against 1.15-1.26 with
// memcpy over 5 pairs (a first version, the probe below still timing memcpy); 1.17 / 1.17 / 1.23
// against 1.20 / 1.25 / 1.19 with this one, the probe timing it (which lowers the bound ~1%).
// bench/overlap's memcpy-speed probe, which prices the copies' CPU time in the bound, times this
// routine.
void StreamingCopy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kStreamingCopyMinBytes) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    // Bytes up to the destination's next 64-byte boundary go through memcpy.
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {  // one cache line: four 16-byte streaming stores
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    _mm_sfence();  // the streamed lines are visible before the stream's next operation
    std::memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace strata::internal
