#include "offload/device/host/host_kernels.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace strata::internal {
namespace {

// Elements per oneTBB task: large enough to amortise scheduling, a multiple of 8 (one AVX2
// vector) so only the last block has a scalar tail.
constexpr size_t kBlock = size_t{1} << 16;

// The distro's libtbb is not built with ThreadSanitizer, so TSan cannot see the synchronisation
// inside it and reports races on every task hand-off. Under TSan without an instrumented oneTBB
// (STRATA_TBB_TSAN, scripts/build_tsan_tbb.sh) the blocks run one after another on the stream's
// worker instead: same blocks, same results.
#if defined(__SANITIZE_THREAD__) && !defined(STRATA_TBB_TSAN)
constexpr bool kUseTbb = false;
#else
constexpr bool kUseTbb = true;
#endif

template <DType T>
using DT = std::integral_constant<DType, T>;

template <typename F>
void With(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(DT<DType::kFloat32>{});
      break;
    case DType::kFloat16:
      f(DT<DType::kFloat16>{});
      break;
    case DType::kBFloat16:
      f(DT<DType::kBFloat16>{});
      break;
  }
}

template <DType T>
float Load(const void* p, size_t i) {
  if constexpr (T == DType::kFloat32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (T == DType::kFloat16) {
    return Fp16ToFloat(static_cast<const uint16_t*>(p)[i]);
  } else {
    return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
}

template <DType T>
void Store(void* p, size_t i, float v) {
  if constexpr (T == DType::kFloat32) {
    static_cast<float*>(p)[i] = v;
  } else if constexpr (T == DType::kFloat16) {
    static_cast<uint16_t*>(p)[i] = FloatToFp16(v);
  } else {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
  }
}

void Cast(const KernelLaunch& k, size_t begin, size_t n) {
  With(k.src_dtype, [&](auto s) {
    With(k.dst_dtype, [&](auto d) {
      for (size_t i = begin; i < begin + n; ++i) {
        Store<decltype(d)::value>(k.dst, i, Load<decltype(s)::value>(k.src, i));
      }
    });
  });
}

void Scale(const KernelLaunch& k, size_t begin, size_t n) {
  With(k.dst_dtype, [&](auto t) {
    constexpr DType T = decltype(t)::value;
    for (size_t i = begin; i < begin + n; ++i) Store<T>(k.dst, i, k.alpha * Load<T>(k.src, i));
  });
}

void Add(const KernelLaunch& k, size_t begin, size_t n) {
  With(k.dst_dtype, [&](auto t) {
    With(k.src2_dtype, [&](auto b) {
      constexpr DType T = decltype(t)::value;
      constexpr DType B = decltype(b)::value;
      for (size_t i = begin; i < begin + n; ++i) {
        const float scaled = k.alpha * Load<B>(k.src2, i);
        Store<T>(k.dst, i, Load<T>(k.src, i) + scaled);
      }
    });
  });
}

void Fill(const KernelLaunch& k, size_t begin, size_t n) {
  With(k.dst_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; ++i) Store<decltype(t)::value>(k.dst, i, k.value);
  });
}

bool AnyNonFinite(const KernelLaunch& k, size_t begin, size_t n) {
  bool bad = false;
  With(k.src_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; ++i)
      bad |= !std::isfinite(Load<decltype(t)::value>(k.src, i));
  });
  return bad;
}

double SumSquares(const KernelLaunch& k, size_t begin, size_t n) {
  double lanes[8] = {};
  With(k.src_dtype, [&](auto t) {
    for (size_t i = begin; i < begin + n; ++i) {
      const double x = Load<decltype(t)::value>(k.src, i);
      lanes[(i - begin) % 8] += x * x;
    }
  });
  double sum = 0;
  for (double x : lanes) sum += x;
  return sum;
}

// Runs the vector body on [begin, end) rounded down to 8, the scalar path on the tail.
template <typename R, typename Combine>
R RunRange(const HostKernelPath& path,
           R (*HostKernelPath::*fn)(const KernelLaunch&, size_t, size_t), const KernelLaunch& k,
           size_t begin, size_t end, Combine combine) {
  const size_t n = end - begin;
  const size_t bulk = &path == &kScalarKernelPath ? 0 : n / 8 * 8;
  if constexpr (std::is_void_v<R>) {
    if (bulk) (path.*fn)(k, begin, bulk);
    if (bulk < n) (kScalarKernelPath.*fn)(k, begin + bulk, n - bulk);
  } else {
    R r{};
    if (bulk) r = (path.*fn)(k, begin, bulk);
    if (bulk < n) r = combine(r, (kScalarKernelPath.*fn)(k, begin + bulk, n - bulk));
    return r;
  }
}

void ForEachBlock(size_t numel, const auto& body) {
  const size_t blocks = (numel + kBlock - 1) / kBlock;
  auto run = [&](size_t b) { body(b * kBlock, std::min(numel, (b + 1) * kBlock)); };
  if (blocks <= 1) {
    run(0);
    return;
  }
  if (!kUseTbb) {
    for (size_t b = 0; b < blocks; ++b) run(b);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, blocks, 1), [&](const auto& r) {
    for (size_t b = r.begin(); b != r.end(); ++b) run(b);
  });
}

// Sum of squares over [begin, end) with a fixed block tree, so the result is the same for any
// number of threads.
double SumSquaresRange(const HostKernelPath& path, const KernelLaunch& k, size_t begin,
                       size_t end) {
  auto plus = [](double a, double b) { return a + b; };
  auto block_sum = [&](size_t b, size_t e) {
    return RunRange<double>(path, &HostKernelPath::sum_squares, k, b, e, plus);
  };
  if (end - begin <= kBlock) return block_sum(begin, end);
  const size_t blocks = (end - begin + kBlock - 1) / kBlock;
  if (!kUseTbb) {
    // Same pairwise tree as parallel_deterministic_reduce with simple_partitioner and grain 1.
    auto tree = [&](auto& self, size_t lo, size_t hi) -> double {
      if (hi - lo == 1) return block_sum(begin + lo * kBlock, std::min(end, begin + hi * kBlock));
      const size_t mid = lo + (hi - lo) / 2;
      return self(self, lo, mid) + self(self, mid, hi);
    };
    return tree(tree, 0, blocks);
  }
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<size_t>(0, blocks, 1), 0.0,
      [&](const tbb::blocked_range<size_t>& r, double acc) {
        for (size_t b = r.begin(); b != r.end(); ++b) {
          acc += block_sum(begin + b * kBlock, std::min(end, begin + (b + 1) * kBlock));
        }
        return acc;
      },
      plus, tbb::simple_partitioner());
}

void L2NormPartials(const HostKernelPath& path, const KernelLaunch& k) {
  const size_t chunk = L2ChunkNumel(k.numel, k.num_partials);
  auto one = [&](size_t p) {
    const size_t b = std::min(k.numel, p * chunk);
    const size_t e = std::min(k.numel, b + chunk);
    k.partials[p] = static_cast<float>(b == e ? 0.0 : SumSquaresRange(path, k, b, e));
  };
  if (k.num_partials == 1 || chunk >= kBlock * 4 || !kUseTbb) {
    for (size_t p = 0; p < k.num_partials; ++p) one(p);  // each chunk is parallel inside
  } else {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, k.num_partials, 1), [&](const auto& r) {
      for (size_t p = r.begin(); p != r.end(); ++p) one(p);
    });
  }
}

}  // namespace

const HostKernelPath kScalarKernelPath = {&Cast, &Scale, &Add, &Fill, &AnyNonFinite, &SumSquares};

HostKernelIsa DetectHostKernelIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return HostKernelIsa::kAvx2;
  }
  return HostKernelIsa::kScalar;
}

const char* HostKernelIsaName(HostKernelIsa isa) {
  return isa == HostKernelIsa::kAvx2 ? "avx2+f16c" : "scalar";
}

Status RunHostKernel(const KernelLaunch& k, HostKernelIsa isa) {
  const HostKernelPath& path = isa == HostKernelIsa::kAvx2 ? kAvx2KernelPath : kScalarKernelPath;
  auto elementwise = [&](void (*HostKernelPath::*fn)(const KernelLaunch&, size_t, size_t)) {
    ForEachBlock(k.numel, [&](size_t b, size_t e) {
      RunRange<void>(path, fn, k, b, e, [](int, int) { return 0; });
    });
  };
  switch (k.op) {
    case KernelOp::kCast:
      elementwise(&HostKernelPath::cast);
      return Status::Ok();
    case KernelOp::kScale:
      elementwise(&HostKernelPath::scale);
      return Status::Ok();
    case KernelOp::kAdd:
      elementwise(&HostKernelPath::add);
      return Status::Ok();
    case KernelOp::kFill:
      elementwise(&HostKernelPath::fill);
      return Status::Ok();
    case KernelOp::kCheckFinite: {
      std::atomic<bool> bad{false};
      ForEachBlock(k.numel, [&](size_t b, size_t e) {
        auto either = [](bool x, bool y) { return x || y; };
        if (RunRange<bool>(path, &HostKernelPath::any_non_finite, k, b, e, either)) {
          bad.store(true, std::memory_order_relaxed);
        }
      });
      if (bad.load()) std::atomic_ref<uint32_t>(*k.flag).store(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    case KernelOp::kL2NormPartials:
      L2NormPartials(path, k);
      return Status::Ok();
  }
  return InternalError("host kernel: unknown op");
}

}  // namespace strata::internal
