// Portable scalar kernels: the fallback for any x86-64 (or other) CPU. Compiled with baseline
// flags (plus -fno-math-errno so sqrt is one instruction).

#include <cmath>

#include "core/half.h"
#include "cpu_adam/simd/kernel_impl.h"

namespace strata::internal {
namespace {

struct ScalarOps {
  using V = float;
  static constexpr size_t kWidth = 1;
  static constexpr size_t kUnroll = 1;
  static constexpr bool kPrefetch = false;
  static constexpr bool kPairBf16 = false;
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static void Store(float* p, V v) { *p = v; }
  static V LoadF16(const uint16_t* p) { return Fp16ToFloat(*p); }
  static V LoadBf16(const uint16_t* p) { return Bf16ToFloat(*p); }
  static void StoreF16(uint16_t* p, V v) { *p = FloatToFp16(v); }
  static void StoreBf16(uint16_t* p, V v) { *p = FloatToBf16(v); }
  static V Add(V a, V b) { return a + b; }
  static V Mul(V a, V b) { return a * b; }
  static V Div(V a, V b) { return a / b; }
  static V Sqrt(V a) { return __builtin_sqrtf(a); }
  // Two roundings: baseline x86-64 has no FMA (and -ffp-contract cannot fuse without one).
  static V MulAdd(V a, V b, V c) { return a * b + c; }
  static V NegMulAdd(V a, V b, V c) { return c - a * b; }
  static V Sign(V a) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f); }
  static void Prefetch(const void*) {}
};

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = MakeKernelTable<ScalarOps>("scalar");
  return table;
}

}  // namespace strata::internal
