// DType: the element types of tensors in Strata - fp32 (master weights, optimizer state) and the
// 16-bit compute types fp16 and bf16 (stored as raw uint16_t bit patterns; conversions are in
// core/half.h). One definition for every layer. C++17-clean: CUDA sources include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

constexpr size_t DTypeBytes(DType t) { return t == DType::kFloat32 ? 4 : 2; }

// "fp32", "fp16", "bf16".
constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
  }
  return "?";
}

// Accepts the names above and "float32"/"float", "float16"/"half", "bfloat16".
constexpr std::optional<DType> ParseDType(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFloat32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  return std::nullopt;
}

}  // namespace strata
