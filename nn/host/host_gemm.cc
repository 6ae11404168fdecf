// Host GEMM: OpenBLAS cblas_sgemm on fp32; 16-bit operands are converted to fp32 scratch first
// (rows in parallel with oneTBB, before BLAS starts) and a 16-bit C is accumulated through an
// fp32 scratch product, rounded once.
#include <cblas.h>

#include <chrono>
#include <vector>

#include "nn/host/host_ops.h"
#include "nn/host/host_threads.h"
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
    const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
    if (g.c_dtype == DType::kFloat32) {
      float* c = static_cast<float*>(g.c) + i * g.stride_c;
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(g.m), static_cast<int>(g.n),
                  static_cast<int>(g.k), g.alpha, a, static_cast<int>(lda), b,
                  static_cast<int>(ldb), g.beta, c, static_cast<int>(g.ldc));
    } else {
      // beta == 1 (checked): C16 += alpha * op(A) op(B), through fp32.
      std::vector<float>& tmp = Scratch(2);
      const size_t need = static_cast<size_t>(g.m * g.n);
      if (tmp.size() < need) tmp.resize(need);
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(g.m), static_cast<int>(g.n),
                  static_cast<int>(g.k), g.alpha, a, static_cast<int>(lda), b,
                  static_cast<int>(ldb), 0.0f, tmp.data(), static_cast<int>(g.n));
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

namespace strata::nn {

void SetHostBlasThreads(int threads) { openblas_set_num_threads(threads); }
int HostBlasThreads() { return openblas_get_num_threads(); }

}  // namespace strata::nn
