// Element math on host-accessible buffers for the collectives' host paths: fp32/fp16/bf16 loaded
// as fp32, combined, stored back rounded to nearest even. Internal to engine/comm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/half.h"
#include "engine/comm/communicator.h"

namespace strata::internal {

inline float LoadAsFloat(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kFloat16:
      return Fp16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16:
      return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

inline void StoreFloat(void* p, DType t, size_t i, float v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToFp16(v);
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
      return;
  }
}

// dst[i] = src[i] * scale for i < numel (in fp32, rounded once), then zeros up to padded_numel.
// dst and src may be the same buffer.
inline void ScaleAndPad(const void* src, void* dst, DType t, size_t numel, size_t padded_numel,
                        float scale) {
  if (scale == 1.0f) {
    if (dst != src) std::memmove(dst, src, numel * DTypeBytes(t));
  } else {
    for (size_t i = 0; i < numel; ++i) StoreFloat(dst, t, i, LoadAsFloat(src, t, i) * scale);
  }
  std::memset(static_cast<char*>(dst) + numel * DTypeBytes(t), 0,
              (padded_numel - numel) * DTypeBytes(t));
}

// inout[i] = op(in[i], inout[i]) in fp32 (the body of MPI's 16-bit user ops).
template <DType kType, ReduceOp kOp>
void Combine(const void* in, void* inout, size_t numel) {
  for (size_t i = 0; i < numel; ++i) {
    const float a = LoadAsFloat(in, kType, i), b = LoadAsFloat(inout, kType, i);
    StoreFloat(inout, kType, i, kOp == ReduceOp::kSum ? a + b : std::max(a, b));
  }
}

}  // namespace strata::internal
