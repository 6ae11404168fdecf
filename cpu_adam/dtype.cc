#include "cpu_adam/dtype.h"

#include "cpu_adam/half_convert.h"

namespace strata {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFloat32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  return std::nullopt;
}

size_t DTypeSizeBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

float HalfToFloat(uint16_t h) { return internal::ScalarHalfToFloat(h); }
uint16_t FloatToHalf(float f) { return internal::ScalarFloatToHalf(f); }
float BFloat16ToFloat(uint16_t b) { return internal::ScalarBf16ToFloat(b); }
uint16_t FloatToBFloat16(float f) { return internal::ScalarFloatToBf16(f); }

}  // namespace strata
