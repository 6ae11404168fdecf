// DType: the element types the device kernels and the engine's flat buffers use.
//
// fp32 is the master/optimizer type; fp16 and bf16 are compute types. Their bit layouts are the
// IEEE 754 binary16 and the "brain float" (upper half of a binary32) formats; scalar conversions
// live in offload/device/half.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

constexpr size_t DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace strata
