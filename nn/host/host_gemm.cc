// Host GEMM: OpenBLAS cblas_sgemm on fp32, cut into panels run as oneTBB tasks (Note [GEMM
// panels]); 16-bit operands are converted to fp32 scratch first (rows in parallel with oneTBB,
// before BLAS starts) and a 16-bit C is accumulated through an fp32 scratch product, rounded once.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "nn/host/host_ops.h"
#include "nn/host/simd.h"

namespace strata::nn::internal {
namespace {

// Scratch that grows and is then reused (allocation only when a larger shape first appears).
// Per thread: each stream has its own worker thread.
std::vector<float>& Scratch(int which) {
  thread_local std::vector<float> buffers[3];
  return buffers[which];
}

// Converts `rows` rows of `cols` elements (row stride ld) to a dense fp32 [rows, cols] buffer.
const float* ToFloat(const void* src, DType t, int64_t rows, int64_t cols, int64_t ld, int which) {
  std::vector<float>& buf = Scratch(which);
  const size_t need = static_cast<size_t>(rows * cols);
  if (buf.size() < need) buf.resize(need);
  float* dst = buf.data();
  ParallelFor(0, rows, [&](int64_t r) { LoadAsFloat(src, t, r * ld, cols, dst + r * cols); });
  return dst;
}

}  // namespace

// Note [GEMM panels]
// OpenBLAS runs single-threaded here and the parallelism is oneTBB's. Its own pool splits a GEMM
// statically between its threads, so one thread preempted by another part of the step (CPU Adam,
// the link copies, the aio threads: they share this machine's cores) stalls the whole GEMM, and
// after each call its threads spin on sched_yield for ~0.1 s (OpenBLAS's THREAD_TIMEOUT), which
// took ~0.1 s of CPU per overlapped ZeRO-Infinity step (perf). Instead C is cut into panels of
// rows (or of columns, when it is wider than tall) sized by the work only, each at least
// kPanelFlops and a multiple of kPanelAlign rows or columns, and the panels are oneTBB tasks:
// they share the workers with every other parallel loop and are stolen by whichever thread is
// free. Each element of C is still one dot product over all of k in OpenBLAS's order, and the
// cut depends on the shape and the machine's CPU count alone (OpenBLAS's bits depend on the cut:
// its small-matrix kernels), so the results do not depend on the number of threads a run uses.
//
// Two panels per CPU at most: each panel packs the operand it shares with the others (all of
// op(A) when cut by columns, all of op(B) by rows), so more panels repeat that packing. On 2
// CPUs, 16 panels against 4 cost ~5% of GEMM throughput in bench/train_step (small 160-167 vs
// 167-174 GFLOP/s; 1b-shape 258-261 vs 268-270) and ~8% of the overlap bench's compute-bound
// step; 2 panels per CPU still leave a free thread something to steal.
GemmCut CutGemm(int64_t m, int64_t n, int64_t k, int64_t max_panels) {
  constexpr double kPanelFlops = 4e6;
  constexpr int64_t kPanelAlign = 16;
  GemmCut cut;
  cut.by_rows = m >= n;
  const int64_t dim = cut.by_rows ? m : n;
  const double flops = std::min(
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k), 1e18);
  const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(flops / kPanelFlops), 1,
                                           std::max<int64_t>(1, max_panels));
  cut.width = (((dim + want - 1) / want + kPanelAlign - 1) / kPanelAlign) * kPanelAlign;
  cut.panels = cut.width > 0 ? (dim + cut.width - 1) / cut.width : 1;
  return cut;
}

int64_t GemmMaxPanels() {
  // The machine's CPUs, not this process's affinity: ranks bound to a core by mpirun cut as the
  // unbound process does (OpenBLAS's bits depend on the cut: its small-matrix kernels).
  static const int64_t panels =
      std::clamp<int64_t>(2 * static_cast<int64_t>(std::thread::hardware_concurrency()), 2, 16);
  return panels;
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  static std::once_flag single;
  std::call_once(single, [] {
    openblas_set_num_threads(1);
    if (openblas_get_parallel() == 2) {  // OpenMP: the setting is the calling thread's only
      LogWarning(
          "nn: OpenBLAS is its OpenMP build: each GEMM panel may start a team of threads "
          "(install libopenblas0-pthread, or set OMP_NUM_THREADS=1)");
    }
  });
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  auto gemm = [&](int64_t rows, int64_t cols, const float* pa, const float* pb, float* pc) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(rows), static_cast<int>(cols),
                static_cast<int>(k), alpha, pa, static_cast<int>(lda), pb, static_cast<int>(ldb),
                beta, pc, static_cast<int>(ldc));
  };
  const GemmCut cut = CutGemm(m, n, k, GemmMaxPanels());
  const bool by_rows = cut.by_rows;
  const int64_t dim = by_rows ? m : n, width = cut.width, panels = cut.panels;
  if (panels <= 1) {
    gemm(m, n, a, b, c);
    return;
  }
  ParallelFor(0, panels, [&](int64_t p) {
    const int64_t lo = p * width, len = std::min(dim, lo + width) - lo;
    if (by_rows) {  // rows [lo, lo + len) of op(A) and C
      gemm(len, n, trans_a ? a + lo : a + lo * lda, b, c + lo * ldc);
    } else {  // columns [lo, lo + len) of op(B) and C
      gemm(m, len, a, trans_b ? b + lo * ldb : b + lo, c + lo);
    }
  });
}

Status HostGemm(const GemmArgs& g) {
  // op(A) [m, k] is stored as [m, k] (or [k, m] transposed); same for B.
  const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  for (int64_t i = 0; i < g.batch; ++i) {
    const float* a;
    int64_t lda = g.lda;
    if (g.a_dtype == DType::kFloat32) {
      a = static_cast<const float*>(g.a) + i * g.stride_a;
    } else {
      a = ToFloat(static_cast<const uint16_t*>(g.a) + i * g.stride_a, g.a_dtype, a_rows, a_cols,
                  g.lda, 0);
      lda = a_cols;
    }
    const float* b;
    int64_t ldb = g.ldb;
    if (g.b_dtype == DType::kFloat32) {
      b = static_cast<const float*>(g.b) + i * g.stride_b;
    } else {
      b = ToFloat(static_cast<const uint16_t*>(g.b) + i * g.stride_b, g.b_dtype, b_rows, b_cols,
                  g.ldb, 1);
      ldb = b_cols;
    }
    if (g.c_dtype == DType::kFloat32) {
      float* c = static_cast<float*>(g.c) + i * g.stride_c;
      Sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, c, g.ldc);
    } else {
      // beta == 1 (checked): C16 += alpha * op(A) op(B), through fp32.
      std::vector<float>& tmp = Scratch(2);
      const size_t need = static_cast<size_t>(g.m * g.n);
      if (tmp.size() < need) tmp.resize(need);
      Sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, 0.0f, tmp.data(), g.n);
      void* c = static_cast<uint16_t*>(g.c) + i * g.stride_c;
      const float* t = tmp.data();
      ParallelFor(0, g.m, [&](int64_t r) {
        AccumulateFromFloat(c, g.c_dtype, r * g.ldc, g.n, t + r * g.n);
      });
    }
  }
  return Status::Ok();
}

}  // namespace strata::nn::internal
