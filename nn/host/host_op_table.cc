// The host op table: each entry copies its arguments into a heap block owned by the HostTask
// (HostTask captures are capped at 48 bytes; one small allocation per op is noise next to the
// op itself) and runs the synchronous kernel on the stream's worker, timing it when asked.
#include <chrono>
#include <memory>

#include "nn/host/host_ops.h"

namespace strata::nn::internal {
namespace {

using Clock = std::chrono::steady_clock;

// `Self` ops record their own time split (attention separates its GEMMs).
template <OpKind kOp, bool kSelfTimed, typename Args, Status (*kFn)(const Args&)>
Status Enqueue(const Stream& stream, const Args& args) {
  auto p = std::make_unique<Args>(args);
  return stream.LaunchHostFunc([p = std::move(p)]() -> Status {
    if (kSelfTimed || !OpTimingEnabled()) return kFn(*p);
    const auto t0 = Clock::now();
    Status s = kFn(*p);
    RecordOpTime(
        kOp, static_cast<uint64_t>(
                 std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    return s;
  });
}

Status Gemm(const Stream& s, const GemmArgs& a) {
  return Enqueue<OpKind::kGemm, false, GemmArgs, HostGemm>(s, a);
}

Status EmbFwd(const Stream& s, const int32_t* ids, int64_t n, const void* table, DType dtype,
              int64_t vocab, int64_t dim, float* out) {
  EmbeddingArgs a{ids, n, table, nullptr, dtype, vocab, dim, nullptr, out};
  return Enqueue<OpKind::kEmbeddingForward, false, EmbeddingArgs, HostEmbeddingForward>(s, a);
}

Status EmbBwd(const Stream& s, const int32_t* ids, int64_t n, const float* dout, void* dtable,
              DType dtype, int64_t vocab, int64_t dim) {
  EmbeddingArgs a{ids, n, nullptr, dtable, dtype, vocab, dim, dout, nullptr};
  return Enqueue<OpKind::kEmbeddingBackward, false, EmbeddingArgs, HostEmbeddingBackward>(s, a);
}

Status RmsFwd(const Stream& s, const float* x, const void* w, DType w_dtype, int64_t n, int64_t dim,
              float eps, float* y, float* rstd) {
  RmsNormArgs a{x, w, w_dtype, n, dim, eps, y, rstd, nullptr, nullptr, nullptr, DType::kFloat32};
  return Enqueue<OpKind::kRmsNormForward, false, RmsNormArgs, HostRmsNormForward>(s, a);
}

Status RmsBwd(const Stream& s, const float* x, const void* w, DType w_dtype, const float* rstd,
              const float* dy, int64_t n, int64_t dim, float* dx, void* dw, DType dw_dtype) {
  RmsNormArgs a{x,  w,  w_dtype, n,       dim, 0.0f, nullptr, const_cast<float*>(rstd),
                dy, dx, dw,      dw_dtype};
  return Enqueue<OpKind::kRmsNormBackward, false, RmsNormArgs, HostRmsNormBackward>(s, a);
}

Status RopeOp(const Stream& s, float* x, int64_t n, int64_t heads, int64_t head_dim,
              const float* cos, const float* sin, const int32_t* pos, int64_t max_pos,
              bool inverse) {
  RopeArgs a{x, n, heads, head_dim, cos, sin, pos, max_pos, inverse};
  return Enqueue<OpKind::kRope, false, RopeArgs, HostRope>(s, a);
}

Status AttnFwd(const Stream& s, const AttentionArgs& a) {
  return Enqueue<OpKind::kAttentionForward, true, AttentionArgs, HostAttentionForward>(s, a);
}
Status AttnBwd(const Stream& s, const AttentionArgs& a) {
  return Enqueue<OpKind::kAttentionBackward, true, AttentionArgs, HostAttentionBackward>(s, a);
}

Status GluFwd(const Stream& s, const float* g, const float* u, int64_t n, float* h) {
  SwiGluArgs a{g, u, nullptr, n, h, nullptr, nullptr};
  return Enqueue<OpKind::kSwiGluForward, false, SwiGluArgs, HostSwiGluForward>(s, a);
}
Status GluBwd(const Stream& s, const float* g, const float* u, const float* dh, int64_t n,
              float* dg, float* du) {
  SwiGluArgs a{g, u, dh, n, nullptr, dg, du};
  return Enqueue<OpKind::kSwiGluBackward, false, SwiGluArgs, HostSwiGluBackward>(s, a);
}

Status XentFwd(const Stream& s, const CrossEntropyArgs& a) {
  return Enqueue<OpKind::kCrossEntropyForward, false, CrossEntropyArgs, HostCrossEntropyForward>(s,
                                                                                                 a);
}
Status XentBwd(const Stream& s, const CrossEntropyArgs& a) {
  return Enqueue<OpKind::kCrossEntropyBackward, false, CrossEntropyArgs, HostCrossEntropyBackward>(
      s, a);
}

Status CachedAttn(const Stream& s, const CachedAttentionArgs& a) {
  return Enqueue<OpKind::kCachedAttention, false, CachedAttentionArgs, HostCachedAttention>(s, a);
}

const OpTable kHostTable = {
    .backend = "host",
    .gemm = &Gemm,
    .embedding_forward = &EmbFwd,
    .embedding_backward = &EmbBwd,
    .rms_norm_forward = &RmsFwd,
    .rms_norm_backward = &RmsBwd,
    .rope = &RopeOp,
    .attention_forward = &AttnFwd,
    .attention_backward = &AttnBwd,
    .swiglu_forward = &GluFwd,
    .swiglu_backward = &GluBwd,
    .cross_entropy_forward = &XentFwd,
    .cross_entropy_backward = &XentBwd,
    .cached_attention = &CachedAttn,
};

}  // namespace

const OpTable& HostOpTable() { return kHostTable; }

}  // namespace strata::nn::internal
