// The step's NVMe traffic alone: its read and write bytes issued together through Strata's aio on
// the swap files, with no compute. The bound (Note [Scale bound]) times reads and writes in
// separate passes; this says what the same disk gives when they share it, as the step's do, so
// the step's distance from its bound splits into the disk's share and the engine's (a
// diagnostic beside step_over_bound, not part of it: Note [Mixed traffic] in mixed_io.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "aio/aio_options.h"
#include "core/status.h"

namespace strata::bench {

struct MixedIo {
  double seconds = 0;  // for read_bytes + write_bytes
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  double gbps() const {
    return seconds > 0 ? static_cast<double>(read_bytes + write_bytes) / seconds * 1e-9 : 0;
  }
};

// Reads the first half of the bytes of the regular files under `dir` (in name order, laid end to
// end) in `request_bytes` requests while overwriting the second half, writes and reads
// interleaved in the proportion write_bytes : read_bytes with up to four requests in flight,
// until min(read_bytes, half) have been read; each half wraps. The second half's contents are
// lost. NotFound when `dir` holds no file.
Result<MixedIo> MeasureMixedIo(const std::string& dir, const AioOptions& options,
                               size_t request_bytes, uint64_t read_bytes, uint64_t write_bytes);

}  // namespace strata::bench
