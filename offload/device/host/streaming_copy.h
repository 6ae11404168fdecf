// StreamingCopy: the host device's copy for the emulated link (H2D, D2H, D2D), memcpy with
// streaming (non-temporal) stores for large copies. See Note [Streaming copies].
#pragma once

#include <cstddef>

namespace strata::internal {

// Copies above this many bytes use streaming stores.
inline constexpr size_t kStreamingCopyMinBytes = size_t{1} << 20;

// Copies n bytes from src to dst, as std::memcpy (the ranges must not overlap; no alignment
// needed); n >= kStreamingCopyMinBytes goes through streaming stores on x86-64.
void StreamingCopy(void* dst, const void* src, size_t n);

}  // namespace strata::internal
