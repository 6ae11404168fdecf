#include "engine/zero/store/zero3_shards.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace strata {

Status WriteShardsFromMaster(const float* master, size_t flat_begin, size_t numel, DType dtype,
                             ParamStore& store, const Stream& stream) {
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
  // Write is done with `host` when it returns (the NVMe tier copies it into swap buffers).
  return store.Write(flat_begin, host.data(), numel, stream);
}

}  // namespace strata
