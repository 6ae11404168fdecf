// The op set of nn/, declared once: each call checks its arguments, then enqueues the op on
// `stream` through the implementation registered for the stream's device kind (op_registry.h).
// Callers never name a backend; a backend that lacks an op makes the call Unimplemented
// (SupportsOp tells ahead of time).
//
// Conventions: row-major contiguous arrays in device memory of the stream's device; activations
// are fp32; parameters (`w`, `table`) and their gradients may be fp32, fp16 or bf16 — converted
// to fp32 on the way in and rounded once on the way out; parameter gradients accumulate (+=),
// input gradients overwrite. Shapes are in the comments; N = tokens (batch * seq_len).
// Argument errors return at once (InvalidArgument); errors found while running (a token id out
// of range) become the stream's error (Note [Stream errors], offload/device/api/device.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "offload/device/api/stream.h"

namespace strata::nn {

// Labels with this value score nothing (PyTorch's and Hugging Face's ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;

enum class OpKind : uint8_t {
  kGemm,
  kEmbeddingForward,
  kEmbeddingBackward,
  kRmsNormForward,
  kRmsNormBackward,
  kRope,
  kAttentionForward,
  kAttentionBackward,
  kSwiGluForward,
  kSwiGluBackward,
  kCrossEntropyForward,
  kCrossEntropyBackward,
  kCachedAttention,
  kCount,
};
const char* OpKindName(OpKind op);

// C = alpha * op(A) op(B) + beta * C, op(X) = X or X^T; op(A) is [m, k], op(B) [k, n], C [m, n],
// with leading dimensions (row strides) lda/ldb/ldc in elements. `batch` independent products at
// element strides stride_a/b/c. A and B may be any dtype (fp32 compute); C fp32 unless beta
// accumulates into a 16-bit gradient.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  DType a_dtype = DType::kFloat32;
  int64_t lda = 0;
  const void* b = nullptr;
  DType b_dtype = DType::kFloat32;
  int64_t ldb = 0;
  void* c = nullptr;
  DType c_dtype = DType::kFloat32;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};
Status Gemm(const Stream& stream, const GemmArgs& args);

// out[i, :] = table[ids[i], :]; ids int32 in [0, vocab) (else the stream fails, naming it).
// table [vocab, dim] (table_dtype), out [n, dim] fp32.
Status EmbeddingForward(const Stream& stream, const int32_t* ids, int64_t n, const void* table,
                        DType table_dtype, int64_t vocab, int64_t dim, float* out);
// dtable[ids[i], :] += dout[i, :] (scatter-add, deterministic order).
Status EmbeddingBackward(const Stream& stream, const int32_t* ids, int64_t n, const float* dout,
                         void* dtable, DType dtable_dtype, int64_t vocab, int64_t dim);

// y = x * rstd * w, rstd[i] = 1 / sqrt(mean(x[i, :]^2) + eps) (fp32 statistics, saved).
// x, y [n, dim]; w [dim]; rstd [n].
Status RmsNormForward(const Stream& stream, const float* x, const void* w, DType w_dtype, int64_t n,
                      int64_t dim, float eps, float* y, float* rstd);
// dx = d/dx (overwrite), dw += sum_i dy * x * rstd (dw may be null: not wanted).
Status RmsNormBackward(const Stream& stream, const float* x, const void* w, DType w_dtype,
                       const float* rstd, const float* dy, int64_t n, int64_t dim, float* dx,
                       void* dw, DType dw_dtype);

// Rotary embedding in place, Hugging Face's rotate-half convention: for each token i and head,
// with c = cos[pos[i], j], s = sin[pos[i], j] and half = head_dim / 2,
//   x[j] , x[j + half]  ->  x[j] c - x[j + half] s , x[j + half] c + x[j] s      (j < half).
// x [n, heads, head_dim]; cos/sin tables [max_pos, half]; pos [n] int32 in [0, max_pos).
// inverse = true rotates by the opposite angle (the backward of the forward rotation).
Status Rope(const Stream& stream, float* x, int64_t n, int64_t heads, int64_t head_dim,
            const float* cos, const float* sin, const int32_t* pos, int64_t max_pos, bool inverse);

// Causal self-attention with grouped-query heads (heads a multiple of kv_heads; query head h
// uses kv head h / (heads / kv_heads)), softmax(q k^T * scale + causal mask) v.
// q, out [batch, seq, heads, head_dim]; k, v [batch, seq, kv_heads, head_dim];
// probs [batch, heads, seq, seq] (saved for backward; entries above the diagonal are 0).
// row_start, when set, narrows the mask further: query row i of batch row b attends only keys
// row_start[b * seq + i] .. i (packed examples that must not see each other, a sliding window);
// the probabilities left of it are 0. Each entry must lie in [0, i].
struct AttentionArgs {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  const int32_t* row_start = nullptr;  // [batch * seq] or nullptr: every row starts at key 0
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* probs = nullptr;
  float* out = nullptr;
  // Backward only: dout in; dq, dk, dv out (overwritten). `scratch` holds seq * seq floats.
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  float* scratch = nullptr;
};
Status AttentionForward(const Stream& stream, const AttentionArgs& args);
Status AttentionBackward(const Stream& stream, const AttentionArgs& args);

// Attention of new tokens against a KV cache (inference, no backward). Query token i of sequence
// b sits at position p = pos[b * q_len + i] and attends to cache rows 0..p of its sequence (the
// causal mask; rows above p are not read), grouped-query heads as AttentionForward.
// q, out [batch, q_len, heads, head_dim]; k_cache, v_cache [batch, cache_len, kv_heads, head_dim]
// with rows 0..p written before the call; pos int32 [batch * q_len] in [0, cache_len) (else the
// stream fails, naming the position).
//
// window > 0 (Mistral's sliding window) narrows the mask to positions j with p - window < j <= p,
// the mask of AttentionArgs::row_start in training (query i sees keys j with i - j < window), and
// makes the cache rolling: position j lives in row j % cache_len, so positions may exceed
// cache_len (pos >= 0; cache_len >= window, else InvalidArgument). Positions below cache_len are
// in row j as without a window. The caller keeps the window's rows intact: with q_len new tokens
// per sequence written before the call, cache_len >= window + q_len - 1 (a rolling cache holding
// window - 1 positions before the first new one and the q_len new ones).
struct CachedAttentionArgs {
  int64_t batch = 0, q_len = 0, cache_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // 0: no window (rows 0..p, pos < cache_len); > 0: rolling (see above)
  float scale = 1.0f;
  const float* q = nullptr;
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  const int32_t* pos = nullptr;
  float* out = nullptr;
};
Status CachedAttention(const Stream& stream, const CachedAttentionArgs& args);

// h = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up, h [n].
Status SwiGluForward(const Stream& stream, const float* gate, const float* up, int64_t n, float* h);
// dgate, dup from dh (overwrite; they may alias gate and up: in place).
Status SwiGluBackward(const Stream& stream, const float* gate, const float* up, const float* dh,
                      int64_t n, float* dgate, float* dup);

// Causal-LM cross-entropy over shifted labels: token t of each sequence is scored against
// labels[t + 1] (the last token of a sequence and labels of -100 score nothing).
// loss[0] = sum of -log softmax(logits[t])[label] / num_valid (0 if num_valid == 0);
// lse [batch * seq] keeps each row's log-sum-exp for the backward. logits [batch, seq, vocab].
// num_valid is the count of scored labels (the caller counts them on the host).
struct CrossEntropyArgs {
  int64_t batch = 0, seq = 0, vocab = 0;
  float* logits = nullptr;
  const int32_t* labels = nullptr;
  int64_t num_valid = 0;
  float* lse = nullptr;
  float* loss = nullptr;
  // Backward: logits are overwritten with d(loss_scale * loss)/d(logits).
  float loss_scale = 1.0f;
  // For a chunk of rows (nn/modules/lm/lm_head_loss.h): `labels_shifted` means row r is scored
  // against labels[r] (the caller shifted them; -100 scores nothing) and `seq` only sizes the
  // rows, num_valid counts the scored rows of all chunks; `accumulate_loss` adds this call's
  // sum / num_valid to loss[0] instead of writing it.
  bool labels_shifted = false;
  bool accumulate_loss = false;
};
Status CrossEntropyForward(const Stream& stream, const CrossEntropyArgs& args);
Status CrossEntropyBackward(const Stream& stream, const CrossEntropyArgs& args);

}  // namespace strata::nn
