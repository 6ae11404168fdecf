// Element types the CPU optimizers read and write, and exact scalar conversions between them.
//
// Master weights and optimizer state are always fp32. Gradients may arrive as fp32, fp16 or bf16,
// and the optimizer can write a half-precision copy of the updated weights (the compute copy that
// goes back to the device). Half-precision values are stored as raw uint16_t bit patterns.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// "fp32", "fp16", "bf16".
std::string_view DTypeName(DType dtype);
// Accepts the names above and the aliases "float32"/"float", "float16"/"half", "bfloat16".
std::optional<DType> ParseDType(std::string_view name);
size_t DTypeSizeBytes(DType dtype);

// IEEE binary16 <-> fp32. Widening is exact; narrowing rounds to nearest even, keeps subnormals,
// saturates to infinity and keeps NaN a (quiet) NaN. Bit-identical to F16C's vcvtps2ph with
// round-to-nearest-even.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// bfloat16 <-> fp32. Widening is exact; narrowing rounds to nearest even (NaN stays a quiet NaN,
// subnormals are kept, not flushed).
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace strata
