// The CUDA op table: each entry resolves the op's cudaStream_t, launches the op's kernels (or
// cuBLAS, cuda_gemm.cc / cuda_attention.cc) there, and enqueues the GPU-side index check where
// the op takes indices (Note [CUDA op errors], cuda_context.h). Nothing here synchronises.
#include "nn/cuda/cuda_op_table.h"

#include "nn/cuda/cuda_context.h"
#include "nn/cuda/cuda_nn_kernels.h"
#include "nn/cuda/cuda_ops.h"

namespace strata::nn::internal {
namespace {

using cuda::CudaErr;
using cuda::IndexKind;
using cuda::OpStream;
using cuda::Resolve;

Status EmbFwd(const Stream& stream, const int32_t* ids, int64_t n, const void* table, DType dtype,
              int64_t vocab, int64_t dim, float* out) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "embedding_forward"));
  STRATA_RETURN_IF_ERROR(
      CudaErr(cuda::LaunchEmbeddingForward(ids, n, table, dtype, vocab, dim, out, s.raw()), s.op,
              "launch"));
  return cuda::EnqueueIndexCheck(s, ids, n, vocab, IndexKind::kTokenId);
}

Status EmbBwd(const Stream& stream, const int32_t* ids, int64_t n, const float* dout, void* dtable,
              DType dtype, int64_t vocab, int64_t dim) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "embedding_backward"));
  STRATA_RETURN_IF_ERROR(
      CudaErr(cuda::LaunchEmbeddingBackward(ids, n, dout, dtable, dtype, vocab, dim, s.raw()), s.op,
              "launch"));
  return cuda::EnqueueIndexCheck(s, ids, n, vocab, IndexKind::kTokenId);
}

Status RmsFwd(const Stream& stream, const float* x, const void* w, DType w_dtype, int64_t n,
              int64_t dim, float eps, float* y, float* rstd) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "rms_norm_forward"));
  return CudaErr(cuda::LaunchRmsNormForward(x, w, w_dtype, n, dim, eps, y, rstd, s.raw()), s.op,
                 "launch");
}

Status RmsBwd(const Stream& stream, const float* x, const void* w, DType w_dtype, const float* rstd,
              const float* dy, int64_t n, int64_t dim, float* dx, void* dw, DType dw_dtype) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "rms_norm_backward"));
  if (dx != nullptr) {
    STRATA_RETURN_IF_ERROR(
        CudaErr(cuda::LaunchRmsNormBackwardDx(x, w, w_dtype, rstd, dy, n, dim, dx, s.raw()), s.op,
                "launch dx"));
  }
  if (dw == nullptr) return Status::Ok();
  // dw through per-row-block partials summed in a fixed order (deterministic, no atomics).
  const int64_t blocks = (n + cuda::kRmsRowBlock - 1) / cuda::kRmsRowBlock;
  cuda::Scratch scratch(s);
  STRATA_ASSIGN_OR_RETURN(float* partial, scratch.Floats(blocks * dim));
  STRATA_RETURN_IF_ERROR(CudaErr(
      cuda::LaunchRmsNormDwPartials(x, rstd, dy, n, dim, partial, s.raw()), s.op, "dw partials"));
  STRATA_RETURN_IF_ERROR(CudaErr(
      cuda::LaunchRmsNormDwReduce(partial, blocks, dim, dw, dw_dtype, s.raw()), s.op, "dw sum"));
  return scratch.Release();
}

Status RopeOp(const Stream& stream, float* x, int64_t n, int64_t heads, int64_t head_dim,
              const float* cos, const float* sin, const int32_t* pos, int64_t max_pos,
              bool inverse) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "rope"));
  STRATA_RETURN_IF_ERROR(
      CudaErr(cuda::LaunchRope(x, n, heads, head_dim, cos, sin, pos, max_pos, inverse, s.raw()),
              s.op, "launch"));
  return cuda::EnqueueIndexCheck(s, pos, n, max_pos, IndexKind::kPosition);
}

Status GluFwd(const Stream& stream, const float* g, const float* u, int64_t n, float* h) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "swiglu_forward"));
  return CudaErr(cuda::LaunchSwiGluForward(g, u, n, h, s.raw()), s.op, "launch");
}

Status GluBwd(const Stream& stream, const float* g, const float* u, const float* dh, int64_t n,
              float* dg, float* du) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "swiglu_backward"));
  return CudaErr(cuda::LaunchSwiGluBackward(g, u, dh, n, dg, du, s.raw()), s.op, "launch");
}

Status XentFwd(const Stream& stream, const CrossEntropyArgs& a) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "cross_entropy_forward"));
  STRATA_RETURN_IF_ERROR(CudaErr(
      cuda::LaunchCrossEntropyForward(a.logits, a.labels, a.batch, a.seq, a.vocab, a.labels_shifted,
                                      a.accumulate_loss, a.num_valid, a.lse, a.loss, s.raw()),
      s.op, "launch"));
  // The host checks every label, scored or not; so does this.
  return cuda::EnqueueIndexCheck(s, a.labels, a.batch * a.seq, a.vocab, IndexKind::kLabel);
}

Status XentBwd(const Stream& stream, const CrossEntropyArgs& a) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "cross_entropy_backward"));
  const float scale = a.num_valid > 0 ? a.loss_scale / static_cast<float>(a.num_valid) : 0.0f;
  return CudaErr(cuda::LaunchCrossEntropyBackward(a.logits, a.labels, a.batch, a.seq, a.vocab,
                                                  a.labels_shifted, a.lse, scale, s.raw()),
                 s.op, "launch");
}

Status CachedAttn(const Stream& stream, const CachedAttentionArgs& a) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "cached_attention"));
  STRATA_RETURN_IF_ERROR(
      CudaErr(cuda::LaunchCachedAttention(a.batch, a.q_len, a.cache_len, a.heads, a.kv_heads,
                                          a.head_dim, a.window, a.scale, a.q, a.k_cache, a.v_cache,
                                          a.pos, a.out, s.raw()),
              s.op, "launch"));
  // A rolling cache (window > 0) takes any position >= 0 (row = position % cache_len).
  const int64_t limit = a.window > 0 ? int64_t{1} << 31 : a.cache_len;
  return cuda::EnqueueIndexCheck(s, a.pos, a.batch * a.q_len, limit, IndexKind::kPosition);
}

const OpTable kCudaTable = {
    .backend = "cuda",
    .gemm = &cuda::CudaGemm,
    .embedding_forward = &EmbFwd,
    .embedding_backward = &EmbBwd,
    .rms_norm_forward = &RmsFwd,
    .rms_norm_backward = &RmsBwd,
    .rope = &RopeOp,
    .attention_forward = &cuda::CudaAttentionForward,
    .attention_backward = &cuda::CudaAttentionBackward,
    .swiglu_forward = &GluFwd,
    .swiglu_backward = &GluBwd,
    .cross_entropy_forward = &XentFwd,
    .cross_entropy_backward = &XentBwd,
    .cached_attention = &CachedAttn,
};

}  // namespace

const OpTable& CudaOpTable() { return kCudaTable; }

}  // namespace strata::nn::internal
