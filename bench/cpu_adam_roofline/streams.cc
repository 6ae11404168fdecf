// Compiled with -O3 -march=native -fno-math-errno (see CMakeLists.txt): without -fno-math-errno
// GCC keeps sqrt scalar (it must be able to set errno) and the plain loop becomes compute-bound.
#include "bench/cpu_adam_roofline/streams.h"

#include <immintrin.h>

#include <algorithm>
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

void ProbeFp32Streaming(float* p, const float* g, float* m, float* v, size_t n) {
  n = n / 16 * 16;
  for (size_t i = 0; i < n; i += 8) {
    F8 pv = Load<F8>(p + i), gv = Load<F8>(g + i), mv = Load<F8>(m + i), vv = Load<F8>(v + i);
    asm volatile("" : "+x"(pv), "+x"(mv), "+x"(vv) : "x"(gv));
#if defined(__AVX__)
    _mm256_stream_ps(p + i, pv);
    _mm256_stream_ps(m + i, mv);
    _mm256_stream_ps(v + i, vv);
#else
    for (int h = 0; h < 8; h += 4) {
      _mm_stream_ps(p + i + h, _mm_loadu_ps(reinterpret_cast<const float*>(&pv) + h));
      _mm_stream_ps(m + i + h, _mm_loadu_ps(reinterpret_cast<const float*>(&mv) + h));
      _mm_stream_ps(v + i + h, _mm_loadu_ps(reinterpret_cast<const float*>(&vv) + h));
    }
#endif
  }
  _mm_sfence();
}

void ProbeFp32TilePrefetch(float* p, const float* g, float* m, float* v, size_t n) {
  n = n / 16 * 16;
  for (size_t t = 0; t < n; t += kProbeTile) {
    const size_t next = t + kProbeTile, end = std::min(n, next);
    if (next < n) {
      const size_t len = std::min(kProbeTile, n - next);
      for (const float* a :
           {static_cast<const float*>(p + next), g + next, static_cast<const float*>(m + next),
            static_cast<const float*>(v + next)}) {
        for (size_t k = 0; k < len; k += 16)
          _mm_prefetch(reinterpret_cast<const char*>(a + k), _MM_HINT_T1);
      }
    }
    ProbeFp32(p + t, g + t, m + t, v + t, end - t);
  }
}

void ProbeInterleavedState(float* state, const float* g, size_t n) {
  for (size_t i = 0; i + 16 <= n; i += 16) {
    float* block = state + 3 * i;
    F8 gv0 = Load<F8>(g + i), gv1 = Load<F8>(g + i + 8);
    asm volatile("" : : "x"(gv0), "x"(gv1));
    for (int k = 0; k < 48; k += 8) {
      F8 x = Load<F8>(block + k);
      asm volatile("" : "+x"(x));
      Store(block + k, x);
    }
  }
}

PlainAdamArgs MakePlainAdamArgs(float lr, float beta1, float beta2, float eps, float weight_decay,
                                int64_t step, bool bias_correction) {
  const double t = static_cast<double>(step);
  PlainAdamArgs a{};
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.step_size = static_cast<float>(bias_correction ? lr / (1 - std::pow(double{beta1}, t)) : lr);
  a.bc2_rsqrt =
      static_cast<float>(bias_correction ? 1 / std::sqrt(1 - std::pow(double{beta2}, t)) : 1.0);
  a.decay = static_cast<float>(1 - double{lr} * weight_decay);
  return a;
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
