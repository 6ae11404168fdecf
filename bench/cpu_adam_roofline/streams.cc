// Compiled with -O3 -march=native -fno-math-errno (see CMakeLists.txt): without -fno-math-errno
// GCC keeps sqrt scalar (it must be able to set errno) and the plain loop becomes compute-bound.
#include "bench/cpu_adam_roofline/streams.h"

#include <cmath>
#include <cstring>

namespace strata::bench {
namespace {

using F8 = float __attribute__((vector_size(32)));
using H8 = uint16_t __attribute__((vector_size(16)));

template <typename T>
inline T Load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
inline void Store(void* p, const T& v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

void ProbeFp32(float* p, const float* g, float* m, float* v, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    F8 pv = Load<F8>(p + i), gv = Load<F8>(g + i), mv = Load<F8>(m + i), vv = Load<F8>(v + i);
    // An empty asm that "may change" p, m, v and "uses" g: the loads and stores must happen.
    asm volatile("" : "+x"(pv), "+x"(mv), "+x"(vv) : "x"(gv));
    Store(p + i, pv);
    Store(m + i, mv);
    Store(v + i, vv);
  }
}

void ProbeHalfMix(float* p, const uint16_t* g, float* m, float* v, uint16_t* copy, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    F8 pv = Load<F8>(p + i), mv = Load<F8>(m + i), vv = Load<F8>(v + i);
    H8 gv = Load<H8>(g + i);
    asm volatile("" : "+x"(pv), "+x"(mv), "+x"(vv), "+x"(gv));
    Store(p + i, pv);
    Store(m + i, mv);
    Store(v + i, vv);
    Store(copy + i, gv);
  }
}

void PlainAdamFp32(float* __restrict p, const float* __restrict g, float* __restrict m,
                   float* __restrict v, size_t n, const PlainAdamArgs& a) {
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps;
  const float omb1 = 1.0f - b1, omb2 = 1.0f - b2;
  const float step = a.step_size, bc2 = a.bc2_rsqrt, decay = a.decay;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (std::sqrt(vi) * bc2 + eps);
  }
}

}  // namespace strata::bench
