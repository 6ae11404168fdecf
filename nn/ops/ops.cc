// Argument checks shared by every backend, then dispatch through the stream's op table.
#include "nn/ops/ops.h"

#include <string>

#include "nn/ops/op_registry.h"
#include "offload/device/api/device.h"

namespace strata::nn {
namespace {

Result<const OpTable*> Table(const Stream& stream, OpKind op) {
  if (!stream.valid()) {
    return FailedPreconditionError(std::string(OpKindName(op)) + ": empty stream handle");
  }
  const DeviceKind kind = stream.device()->kind();
  const OpTable* t = OpTableFor(kind);
  if (t == nullptr || !SupportsOp(kind, op)) {
    return UnimplementedError(std::string(OpKindName(op)) + ": no implementation for device " +
                              DeviceKindName(kind));
  }
  return t;
}

Status Bad(OpKind op, const std::string& why) {
  return InvalidArgumentError(std::string(OpKindName(op)) + ": " + why);
}

Status NonNull(OpKind op, std::initializer_list<std::pair<const void*, const char*>> ptrs) {
  for (const auto& [p, what] : ptrs) {
    if (p == nullptr) return Bad(op, std::string(what) + " is null");
  }
  return Status::Ok();
}

Status Positive(OpKind op, std::initializer_list<std::pair<int64_t, const char*>> dims) {
  for (const auto& [d, what] : dims) {
    if (d <= 0) return Bad(op, std::string(what) + " must be > 0, got " + std::to_string(d));
  }
  return Status::Ok();
}

}  // namespace

const char* OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kEmbeddingForward:
      return "embedding_forward";
    case OpKind::kEmbeddingBackward:
      return "embedding_backward";
    case OpKind::kRmsNormForward:
      return "rms_norm_forward";
    case OpKind::kRmsNormBackward:
      return "rms_norm_backward";
    case OpKind::kRope:
      return "rope";
    case OpKind::kAttentionForward:
      return "attention_forward";
    case OpKind::kAttentionBackward:
      return "attention_backward";
    case OpKind::kSwiGluForward:
      return "swiglu_forward";
    case OpKind::kSwiGluBackward:
      return "swiglu_backward";
    case OpKind::kCrossEntropyForward:
      return "cross_entropy_forward";
    case OpKind::kCrossEntropyBackward:
      return "cross_entropy_backward";
    case OpKind::kCachedAttention:
      return "cached_attention";
    case OpKind::kCount:
      break;
  }
  return "?";
}

Status Gemm(const Stream& stream, const GemmArgs& a) {
  constexpr OpKind op = OpKind::kGemm;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  if (a.m == 0 || a.n == 0 || a.batch == 0) return Status::Ok();
  if (a.m < 0 || a.n < 0 || a.k < 0 || a.batch < 0) return Bad(op, "negative dimension");
  STRATA_RETURN_IF_ERROR(NonNull(op, {{a.c, "C"}}));
  if (a.k > 0) STRATA_RETURN_IF_ERROR(NonNull(op, {{a.a, "A"}, {a.b, "B"}}));
  const int64_t a_cols = a.trans_a ? a.m : a.k;
  const int64_t b_cols = a.trans_b ? a.k : a.n;
  if (a.lda < a_cols || a.ldb < b_cols || a.ldc < a.n) {
    return Bad(op, "leading dimension smaller than a row (lda " + std::to_string(a.lda) + ", ldb " +
                       std::to_string(a.ldb) + ", ldc " + std::to_string(a.ldc) + ")");
  }
  if (a.c_dtype != DType::kFloat32 && a.beta != 1.0f) {
    return Bad(op, "a 16-bit C is only supported when accumulating (beta = 1)");
  }
  return t->gemm(stream, a);
}

Status EmbeddingForward(const Stream& stream, const int32_t* ids, int64_t n, const void* table,
                        DType table_dtype, int64_t vocab, int64_t dim, float* out) {
  constexpr OpKind op = OpKind::kEmbeddingForward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}, {vocab, "vocab"}, {dim, "dim"}}));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{ids, "ids"}, {table, "table"}, {out, "out"}}));
  return t->embedding_forward(stream, ids, n, table, table_dtype, vocab, dim, out);
}

Status EmbeddingBackward(const Stream& stream, const int32_t* ids, int64_t n, const float* dout,
                         void* dtable, DType dtable_dtype, int64_t vocab, int64_t dim) {
  constexpr OpKind op = OpKind::kEmbeddingBackward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}, {vocab, "vocab"}, {dim, "dim"}}));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{ids, "ids"}, {dout, "dout"}, {dtable, "dtable"}}));
  return t->embedding_backward(stream, ids, n, dout, dtable, dtable_dtype, vocab, dim);
}

Status RmsNormForward(const Stream& stream, const float* x, const void* w, DType w_dtype, int64_t n,
                      int64_t dim, float eps, float* y, float* rstd) {
  constexpr OpKind op = OpKind::kRmsNormForward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}, {dim, "dim"}}));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{x, "x"}, {w, "w"}, {y, "y"}, {rstd, "rstd"}}));
  if (!(eps >= 0)) return Bad(op, "eps must be >= 0");
  return t->rms_norm_forward(stream, x, w, w_dtype, n, dim, eps, y, rstd);
}

Status RmsNormBackward(const Stream& stream, const float* x, const void* w, DType w_dtype,
                       const float* rstd, const float* dy, int64_t n, int64_t dim, float* dx,
                       void* dw, DType dw_dtype) {
  constexpr OpKind op = OpKind::kRmsNormBackward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}, {dim, "dim"}}));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{x, "x"}, {w, "w"}, {rstd, "rstd"}, {dy, "dy"}}));
  if (dx == nullptr && dw == nullptr) return Status::Ok();
  return t->rms_norm_backward(stream, x, w, w_dtype, rstd, dy, n, dim, dx, dw, dw_dtype);
}

Status Rope(const Stream& stream, float* x, int64_t n, int64_t heads, int64_t head_dim,
            const float* cos, const float* sin, const int32_t* pos, int64_t max_pos, bool inverse) {
  constexpr OpKind op = OpKind::kRope;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(
      Positive(op, {{n, "n"}, {heads, "heads"}, {head_dim, "head_dim"}, {max_pos, "max_pos"}}));
  if (head_dim % 2 != 0) return Bad(op, "head_dim must be even, got " + std::to_string(head_dim));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{x, "x"}, {cos, "cos"}, {sin, "sin"}, {pos, "pos"}}));
  return t->rope(stream, x, n, heads, head_dim, cos, sin, pos, max_pos, inverse);
}

namespace {
Status CheckAttention(OpKind op, const AttentionArgs& a) {
  STRATA_RETURN_IF_ERROR(Positive(op, {{a.batch, "batch"},
                                       {a.seq, "seq"},
                                       {a.heads, "heads"},
                                       {a.kv_heads, "kv_heads"},
                                       {a.head_dim, "head_dim"}}));
  if (a.heads % a.kv_heads != 0) {
    return Bad(op, "heads (" + std::to_string(a.heads) + ") must be a multiple of kv_heads (" +
                       std::to_string(a.kv_heads) + ")");
  }
  return NonNull(op, {{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.probs, "probs"}});
}
}  // namespace

Status AttentionForward(const Stream& stream, const AttentionArgs& a) {
  constexpr OpKind op = OpKind::kAttentionForward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(CheckAttention(op, a));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{a.out, "out"}}));
  return t->attention_forward(stream, a);
}

Status AttentionBackward(const Stream& stream, const AttentionArgs& a) {
  constexpr OpKind op = OpKind::kAttentionBackward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(CheckAttention(op, a));
  STRATA_RETURN_IF_ERROR(NonNull(
      op, {{a.dout, "dout"}, {a.dq, "dq"}, {a.dk, "dk"}, {a.dv, "dv"}, {a.scratch, "scratch"}}));
  return t->attention_backward(stream, a);
}

Status CachedAttention(const Stream& stream, const CachedAttentionArgs& a) {
  constexpr OpKind op = OpKind::kCachedAttention;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{a.batch, "batch"},
                                       {a.q_len, "q_len"},
                                       {a.cache_len, "cache_len"},
                                       {a.heads, "heads"},
                                       {a.kv_heads, "kv_heads"},
                                       {a.head_dim, "head_dim"}}));
  if (a.heads % a.kv_heads != 0) {
    return Bad(op, "heads (" + std::to_string(a.heads) + ") must be a multiple of kv_heads (" +
                       std::to_string(a.kv_heads) + ")");
  }
  if (a.window < 0 || a.window > a.cache_len) {
    return Bad(op, "window (" + std::to_string(a.window) + ") must be in [0, cache_len = " +
                       std::to_string(a.cache_len) + "] (0: no window)");
  }
  STRATA_RETURN_IF_ERROR(NonNull(op, {{a.q, "q"},
                                      {a.k_cache, "k_cache"},
                                      {a.v_cache, "v_cache"},
                                      {a.pos, "pos"},
                                      {a.out, "out"}}));
  return t->cached_attention(stream, a);
}

Status SwiGluForward(const Stream& stream, const float* gate, const float* up, int64_t n,
                     float* h) {
  constexpr OpKind op = OpKind::kSwiGluForward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}}));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{gate, "gate"}, {up, "up"}, {h, "h"}}));
  return t->swiglu_forward(stream, gate, up, n, h);
}

Status SwiGluBackward(const Stream& stream, const float* gate, const float* up, const float* dh,
                      int64_t n, float* dgate, float* dup) {
  constexpr OpKind op = OpKind::kSwiGluBackward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(Positive(op, {{n, "n"}}));
  STRATA_RETURN_IF_ERROR(
      NonNull(op, {{gate, "gate"}, {up, "up"}, {dh, "dh"}, {dgate, "dgate"}, {dup, "dup"}}));
  return t->swiglu_backward(stream, gate, up, dh, n, dgate, dup);
}

namespace {
Status CheckCrossEntropy(OpKind op, const CrossEntropyArgs& a) {
  STRATA_RETURN_IF_ERROR(Positive(op, {{a.batch, "batch"}, {a.seq, "seq"}, {a.vocab, "vocab"}}));
  // With shifted labels (a chunk of rows) num_valid normalises the whole loss: it may exceed rows.
  if (a.num_valid < 0 || (!a.labels_shifted && a.num_valid > a.batch * a.seq)) {
    return Bad(op, "num_valid out of range");
  }
  return NonNull(op, {{a.logits, "logits"}, {a.labels, "labels"}, {a.lse, "lse"}});
}
}  // namespace

Status CrossEntropyForward(const Stream& stream, const CrossEntropyArgs& a) {
  constexpr OpKind op = OpKind::kCrossEntropyForward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(CheckCrossEntropy(op, a));
  STRATA_RETURN_IF_ERROR(NonNull(op, {{a.loss, "loss"}}));
  return t->cross_entropy_forward(stream, a);
}

Status CrossEntropyBackward(const Stream& stream, const CrossEntropyArgs& a) {
  constexpr OpKind op = OpKind::kCrossEntropyBackward;
  STRATA_ASSIGN_OR_RETURN(const OpTable* t, Table(stream, op));
  STRATA_RETURN_IF_ERROR(CheckCrossEntropy(op, a));
  return t->cross_entropy_backward(stream, a);
}

}  // namespace strata::nn
