// The host (CPU) backend of the nn op set: the op table registered for DeviceKind::kHost and the
// kernels behind it. Every op is enqueued with Stream::LaunchHostFunc and runs on the stream's
// worker: GEMMs in single-threaded OpenBLAS calls on panels of C run as oneTBB tasks (Note [GEMM
// panels] in host_gemm.cc), everything else in vectorised loops split over rows with oneTBB: one
// thread pool, bounded by the caller's tbb::global_control / task_arena. Kernels run
// synchronously when called directly (tests of internals, benchmarks).
#pragma once

#include "nn/ops/op_registry.h"
#include "nn/ops/ops.h"

namespace strata::nn::internal {

const OpTable& HostOpTable();

// Synchronous kernels (argument checks done by nn/ops/ops.cc).
Status HostGemm(const GemmArgs& a);
// Row-major fp32 C = alpha op(A) op(B) + beta C, C [m, n], as cblas_sgemm, in panels (Note [GEMM
// panels]): every host GEMM goes through it.
// How Sgemm cuts C [m, n]: `panels` (at most max_panels) panels of `width` rows (by_rows) or
// columns, the last shorter; one panel is not cut.
struct GemmCut {
  bool by_rows = true;
  int64_t width = 0, panels = 1;
};
GemmCut CutGemm(int64_t m, int64_t n, int64_t k, int64_t max_panels);
// Sgemm's max_panels: two per CPU of the machine (std::thread::hardware_concurrency, not the
// affinity or the oneTBB arena), between 2 and 16.
int64_t GemmMaxPanels();
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
Status HostAttentionForward(const AttentionArgs& a);
Status HostAttentionBackward(const AttentionArgs& a);
Status HostCachedAttention(const CachedAttentionArgs& a);
Status HostCrossEntropyForward(const CrossEntropyArgs& a);
Status HostCrossEntropyBackward(const CrossEntropyArgs& a);

struct EmbeddingArgs {
  const int32_t* ids;
  int64_t n;
  const void* table;  // forward: table; backward: dtable
  void* dtable;
  DType dtype;
  int64_t vocab, dim;
  const float* dout;
  float* out;
};
Status HostEmbeddingForward(const EmbeddingArgs& a);
Status HostEmbeddingBackward(const EmbeddingArgs& a);

struct RmsNormArgs {
  const float* x;
  const void* w;
  DType w_dtype;
  int64_t n, dim;
  float eps;
  float* y;
  float* rstd;
  const float* dy;
  float* dx;
  void* dw;
  DType dw_dtype;
};
Status HostRmsNormForward(const RmsNormArgs& a);
Status HostRmsNormBackward(const RmsNormArgs& a);

struct RopeArgs {
  float* x;
  int64_t n, heads, head_dim;
  const float* cos;
  const float* sin;
  const int32_t* pos;
  int64_t max_pos;
  bool inverse;
};
Status HostRope(const RopeArgs& a);

struct SwiGluArgs {
  const float* gate;
  const float* up;
  const float* dh;
  int64_t n;
  float* h;
  float* dgate;
  float* dup;
};
Status HostSwiGluForward(const SwiGluArgs& a);
Status HostSwiGluBackward(const SwiGluArgs& a);

}  // namespace strata::nn::internal
