#include "engine/zero3_shards.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace strata {

Status WriteShardsFromMaster(const float* master, size_t numel, DType dtype, void* shards,
                             bool shards_on_host, const Stream& stream) {
  // Through host memory: `master` may be memory of a host-accessible device (HostDevice) that a
  // host-to-device copy must not name as its source.
  std::vector<uint8_t> host(numel * DTypeBytes(dtype));
  if (dtype == DType::kFloat32) {
    std::memcpy(host.data(), master, numel * sizeof(float));
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(host.data());
    for (size_t i = 0; i < numel; ++i) {
      h[i] = dtype == DType::kBFloat16 ? FloatToBf16(master[i]) : FloatToFp16(master[i]);
    }
  }
  const void* src = host.data();
  const size_t bytes = numel * DTypeBytes(dtype);
  if (shards_on_host) {
    std::memcpy(shards, src, bytes);
    return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(stream.CopyAsync(shards, src, bytes, CopyKind::kHostToDevice));
  return stream.Synchronize();  // `host` dies here
}

}  // namespace strata
