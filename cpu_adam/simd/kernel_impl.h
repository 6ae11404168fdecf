// Internal: the optimizer update rules, written once over a small "SIMD ops" interface and
// instantiated by each kernels_<isa>.cc with its own ops (scalar float, __m256, __m512).
//
// An ops struct S provides: type V, kWidth (floats per V), kUnroll (V per loop iteration, so one
// iteration covers one 64-byte line of each fp32 stream), kPrefetch, kPairBf16 (has
// StoreBf16Pair(out, a, b) for 2 * kWidth elements), and static Set1, Load, Store,
// LoadF16, LoadBf16, StoreF16, StoreBf16, Add, Mul, Div, Sqrt, MulAdd(a, b, c) = a*b + c,
// NegMulAdd(a, b, c) = c - a*b, Sign (-1, 0, +1), Prefetch.
//
// Note [Kernels and the one-definition rule]
// Each kernels_<isa>.cc is compiled with different -m flags. An inline function or template with
// external linkage instantiated in two of them would be merged by the linker, and the copy it
// keeps could contain AVX instructions that the scalar path then executes on a CPU without them.
// So everything here (and in core/half.h) lives in an anonymous namespace: each translation
// unit keeps its own copy. Kernel files also avoid out-of-line std:: templates for this reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu_adam/simd/kernel_table.h"

namespace strata::internal {
namespace {  // NOLINT(build/namespaces): see Note [Kernels and the one-definition rule].

template <DType G>
using GradT = std::conditional_t<G == DType::kFloat32, float, uint16_t>;

template <class S, DType G>
inline typename S::V LoadGrad(const GradT<G>* g) {
  if constexpr (G == DType::kFloat32) {
    return S::Load(g);
  } else if constexpr (G == DType::kFloat16) {
    return S::LoadF16(g);
  } else {
    return S::LoadBf16(g);
  }
}

template <ParamCopy C>
using CopyT = std::conditional_t<C == ParamCopy::kFloat32, float, uint16_t>;

template <class S, ParamCopy C>
inline void StoreCopy(CopyT<C>* out, typename S::V p) {
  if constexpr (C == ParamCopy::kFloat16) {
    S::StoreF16(out, p);
  } else if constexpr (C == ParamCopy::kBFloat16) {
    S::StoreBf16(out, p);
  } else if constexpr (C == ParamCopy::kFloat32) {
    S::Store(out, p);
  }
}

// Stores the copies of kUnroll consecutive vectors. Ops with kPairBf16 narrow two vectors to
// bf16 with one pack and one 32-byte store (same bits as two StoreBf16 calls).
template <class S, ParamCopy C>
inline void StoreCopyBlock(CopyT<C>* out, const typename S::V* p) {
  if constexpr (C == ParamCopy::kBFloat16 && S::kPairBf16 && S::kUnroll == 2) {
    S::StoreBf16Pair(out, p[0], p[1]);
  } else {
    for (size_t u = 0; u < S::kUnroll; ++u) StoreCopy<S, C>(out + u * S::kWidth, p[u]);
  }
}

// Adam / AdamW. Per element, in fp32:
//   g  = grad * grad_scale + l2_decay * p
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p  = p * decoupled_decay - step_size * m / (sqrt(v) * bc2_rsqrt + eps)
template <class S, DType G, ParamCopy C>
struct AdamOp {
  using V = typename S::V;
  static constexpr DType kGrad = G;
  static constexpr ParamCopy kCopy = C;
  static constexpr bool kUsesState1 = true;
  static constexpr bool kUsesState2 = true;
  struct K {
    V b1, omb1, b2, omb2, eps, step, bc2, l2, dd, gs;
    explicit K(const StepCoeffs& c)
        : b1(S::Set1(c.beta1)),
          omb1(S::Set1(c.one_minus_beta1)),
          b2(S::Set1(c.beta2)),
          omb2(S::Set1(c.one_minus_beta2)),
          eps(S::Set1(c.eps)),
          step(S::Set1(c.step_size)),
          bc2(S::Set1(c.bc2_rsqrt)),
          l2(S::Set1(c.l2_decay)),
          dd(S::Set1(c.decoupled_decay)),
          gs(S::Set1(c.grad_scale)) {}
  };
  static inline V Apply(const K& k, float* p, const GradT<G>* g, float* m, float* v) {
    V pv = S::Load(p);
    V gv = S::MulAdd(pv, k.l2, S::Mul(LoadGrad<S, G>(g), k.gs));
    V mv = S::MulAdd(S::Load(m), k.b1, S::Mul(gv, k.omb1));
    V vv = S::MulAdd(S::Load(v), k.b2, S::Mul(S::Mul(gv, gv), k.omb2));
    V denom = S::MulAdd(S::Sqrt(vv), k.bc2, k.eps);
    pv = S::NegMulAdd(k.step, S::Div(mv, denom), S::Mul(pv, k.dd));
    S::Store(p, pv);
    S::Store(m, mv);
    S::Store(v, vv);
    return pv;
  }
};

// Adagrad (PyTorch's rule, lr_decay 0). Per element:
//   g = grad * grad_scale + l2_decay * p;  s += g^2;  p -= lr * g / (sqrt(s) + eps)
template <class S, DType G, ParamCopy C>
struct AdagradOp {
  using V = typename S::V;
  static constexpr DType kGrad = G;
  static constexpr ParamCopy kCopy = C;
  static constexpr bool kUsesState1 = false;
  static constexpr bool kUsesState2 = true;
  struct K {
    V lr, eps, l2, gs;
    explicit K(const StepCoeffs& c)
        : lr(S::Set1(c.lr)),
          eps(S::Set1(c.eps)),
          l2(S::Set1(c.l2_decay)),
          gs(S::Set1(c.grad_scale)) {}
  };
  static inline V Apply(const K& k, float* p, const GradT<G>* g, float* /*m*/, float* s) {
    V pv = S::Load(p);
    V gv = S::MulAdd(pv, k.l2, S::Mul(LoadGrad<S, G>(g), k.gs));
    V sv = S::MulAdd(gv, gv, S::Load(s));
    V denom = S::Add(S::Sqrt(sv), k.eps);
    pv = S::NegMulAdd(k.lr, S::Div(gv, denom), pv);
    S::Store(p, pv);
    S::Store(s, sv);
    return pv;
  }
};

// Lion. Per element:
//   g = grad * grad_scale;  p *= decoupled_decay
//   p -= lr * sign(beta1 * m + (1 - beta1) * g);  m = beta2 * m + (1 - beta2) * g
template <class S, DType G, ParamCopy C>
struct LionOp {
  using V = typename S::V;
  static constexpr DType kGrad = G;
  static constexpr ParamCopy kCopy = C;
  static constexpr bool kUsesState1 = true;
  static constexpr bool kUsesState2 = false;
  struct K {
    V lr, b1, omb1, b2, omb2, dd, gs;
    explicit K(const StepCoeffs& c)
        : lr(S::Set1(c.lr)),
          b1(S::Set1(c.beta1)),
          omb1(S::Set1(c.one_minus_beta1)),
          b2(S::Set1(c.beta2)),
          omb2(S::Set1(c.one_minus_beta2)),
          dd(S::Set1(c.decoupled_decay)),
          gs(S::Set1(c.grad_scale)) {}
  };
  static inline V Apply(const K& k, float* p, const GradT<G>* g, float* m, float* /*v*/) {
    V gv = S::Mul(LoadGrad<S, G>(g), k.gs);
    V mv = S::Load(m);
    V cv = S::MulAdd(mv, k.b1, S::Mul(gv, k.omb1));
    V pv = S::NegMulAdd(k.lr, S::Sign(cv), S::Mul(S::Load(p), k.dd));
    mv = S::MulAdd(mv, k.b2, S::Mul(gv, k.omb2));
    S::Store(p, pv);
    S::Store(m, mv);
    return pv;
  }
};

// Runs Op over [begin, end): full vectors in place, then the ragged tail (< kWidth elements) on a
// zero-padded stack copy with the same vector code, so every element sees identical arithmetic.
template <class S, class Op>
void RunRange(const StepCoeffs& c, const KernelArgs& a, size_t begin, size_t end) {
  using GT = GradT<Op::kGrad>;
  using CT = CopyT<Op::kCopy>;
  constexpr size_t kW = S::kWidth;
  constexpr size_t kStep = kW * S::kUnroll;
  constexpr bool kCopy = Op::kCopy != ParamCopy::kNone;
  const typename Op::K k(c);
  float* const p = a.params;
  const GT* const g = static_cast<const GT*>(a.grads);
  float* const s1 = a.state1;
  float* const s2 = a.state2;
  CT* const out = static_cast<CT*>(a.copy);
  auto apply = [&](size_t i) {
    return Op::Apply(k, p + i, g + i, Op::kUsesState1 ? s1 + i : nullptr,
                     Op::kUsesState2 ? s2 + i : nullptr);
  };
  const size_t ahead = c.prefetch_bytes / sizeof(float);
  auto block = [&](size_t i) {
    typename S::V r[S::kUnroll];
    for (size_t u = 0; u < S::kUnroll; ++u) r[u] = apply(i + u * kW);
    if (kCopy) StoreCopyBlock<S, Op::kCopy>(out + i, r);
  };
  size_t i = begin;
  if (S::kPrefetch && ahead != 0) {
    for (; i + kStep <= end; i += kStep) {
      const size_t f = i + ahead;  // prefetching past the end is harmless (never faults)
      S::Prefetch(p + f);
      S::Prefetch(g + f);
      if (Op::kUsesState1) S::Prefetch(s1 + f);
      if (Op::kUsesState2) S::Prefetch(s2 + f);
      block(i);
    }
  } else if constexpr (Op::kCopy == ParamCopy::kBFloat16 && S::kPairBf16) {
    for (; i + kStep <= end; i += kStep) block(i);
  }
  // Otherwise one vector per iteration: measured faster in cache than the 2x block for fp32 and
  // fp16 copies on Zen 3 (the block only pays for its paired bf16 narrowing).
  for (; i + kW <= end; i += kW) {
    const typename S::V r = apply(i);
    if (kCopy) StoreCopy<S, Op::kCopy>(out + i, r);
  }
  if (i == end) return;

  const size_t n = end - i;
  alignas(64) float tp[kW] = {};
  alignas(64) GT tg[kW] = {};
  alignas(64) float t1[kW] = {};
  alignas(64) float t2[kW] = {};
  alignas(64) CT to[kW] = {};
  std::memcpy(tp, p + i, n * sizeof(float));
  std::memcpy(tg, g + i, n * sizeof(GT));
  if (Op::kUsesState1) std::memcpy(t1, s1 + i, n * sizeof(float));
  if (Op::kUsesState2) std::memcpy(t2, s2 + i, n * sizeof(float));
  StoreCopy<S, Op::kCopy>(to, Op::Apply(k, tp, tg, t1, t2));
  std::memcpy(p + i, tp, n * sizeof(float));
  if (Op::kUsesState1) std::memcpy(s1 + i, t1, n * sizeof(float));
  if (Op::kUsesState2) std::memcpy(s2 + i, t2, n * sizeof(float));
  if (kCopy) std::memcpy(out + i, to, n * sizeof(CT));
}

template <class S, template <class, DType, ParamCopy> class Op, DType G>
void FillRow(TileFn (&row)[kNumParamCopies]) {
  row[static_cast<int>(ParamCopy::kNone)] = &RunRange<S, Op<S, G, ParamCopy::kNone>>;
  row[static_cast<int>(ParamCopy::kFloat16)] = &RunRange<S, Op<S, G, ParamCopy::kFloat16>>;
  row[static_cast<int>(ParamCopy::kBFloat16)] = &RunRange<S, Op<S, G, ParamCopy::kBFloat16>>;
  row[static_cast<int>(ParamCopy::kFloat32)] = &RunRange<S, Op<S, G, ParamCopy::kFloat32>>;
}

template <class S, template <class, DType, ParamCopy> class Op>
void FillOp(TileFn (&t)[kNumGradKinds][kNumParamCopies]) {
  FillRow<S, Op, DType::kFloat32>(t[static_cast<int>(DType::kFloat32)]);
  FillRow<S, Op, DType::kFloat16>(t[static_cast<int>(DType::kFloat16)]);
  FillRow<S, Op, DType::kBFloat16>(t[static_cast<int>(DType::kBFloat16)]);
}

template <class S>
KernelTable MakeKernelTable(const char* name) {
  KernelTable t;
  t.name = name;
  FillOp<S, AdamOp>(t.adam);
  FillOp<S, AdagradOp>(t.adagrad);
  FillOp<S, LionOp>(t.lion);
  return t;
}

}  // namespace
}  // namespace strata::internal
