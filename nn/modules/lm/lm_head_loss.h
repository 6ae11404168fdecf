// LmHeadLoss: a causal LM's head (a Linear [vocab, hidden]) and its cross-entropy loss, computed
// in chunks of tokens so that at most `chunk_tokens` x vocab logits exist at once. With vocab
// 151,936 the whole [N, vocab] logits of 4 x 2048 tokens are 5 GB in fp32; a chunk of 1024
// tokens needs 0.6 GB, whatever N.
//
// Forward (with targets), per chunk c of rows [r0, r0 + c):
//   logits_c [c, V] = x_c [c, H] W^T;  lse_c, loss += sum(lse - logits_c[target]) / num_valid.
// Backward, per chunk, last chunk first (its logits are still in the buffer from Forward, so
// they are not recomputed; every other chunk is recomputed with one GEMM):
//   logits_c = x_c W^T;  dlogits_c = (softmax - onehot) * loss_scale / num_valid  (in place);
//   dx_c [c, H] = dlogits_c W;  dW [V, H] (+)= dlogits_c^T x_c.
// With chunk_tokens 0 (or >= N) there is one chunk: the logits are computed once, kept whole
// until Backward (logits() returns them) and nothing is recomputed — the unchunked computation.
// The loss and gradients of the chunked path equal the whole one's within fp32 rounding (the
// loss is summed per chunk, dW accumulated over chunks).
//
// Without targets (logits only) Forward computes the whole [N, V] logits, whatever the chunk.
// The head's hooks (ZeRO-3 gathers) run around Forward and Backward as a Linear's would.
//
// Memory: the logits buffer (min(N, chunk) x V floats, or N x V for logits only) and lse (N
// floats), device memory grown on demand and reused (ScratchBytes says how much).
// Thread safety: driven by one thread, like the module tree it belongs to.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "nn/modules/layers/linear.h"
#include "nn/modules/layers/module.h"
#include "nn/tensor/device_buffer.h"
#include "nn/tensor/tensor.h"

namespace strata::nn {

class LmHeadLoss {
 public:
  // chunk_tokens "auto": all tokens at once while their logits are at most kAutoWholeFloats
  // (64 MiB), else chunks of ceil(N * hidden / vocab) tokens — logits no larger than the hidden
  // states — but at least kAutoMinRows (a GEMM of fewer rows re-reads the whole head weight for
  // little work), rounded up to a multiple of 64.
  static constexpr int64_t kAutoChunk = -1;
  static constexpr int64_t kAutoWholeFloats = int64_t{1} << 24;
  static constexpr int64_t kAutoMinRows = 256;

  // `head` (not owned) must outlive this. chunk_tokens >= 0 (0: one chunk of all tokens) or
  // kAutoChunk.
  LmHeadLoss(Device* device, Linear* head, int64_t chunk_tokens = 0);
  LmHeadLoss(const LmHeadLoss&) = delete;
  LmHeadLoss& operator=(const LmHeadLoss&) = delete;

  int64_t chunk_tokens() const { return chunk_tokens_; }
  // InvalidArgument for a negative chunk other than kAutoChunk.
  Status set_chunk_tokens(int64_t chunk_tokens);

  // x [N, hidden] fp32 (a view kept until Backward). targets: device int32 [N], already shifted
  // (row r is scored against targets[r]; -100 scores nothing), or nullptr for logits only.
  // num_valid: the number of scored rows; loss: one device float, written.
  Status Forward(const RunContext& ctx, const Tensor& x, const int32_t* targets, int64_t num_valid,
                 float* loss);
  // dx [N, hidden] (overwritten; may be empty: not wanted); adds d(loss_scale * loss)/dW to the
  // head weight's gradient slot when it is set. Needs a Forward with targets first.
  Status Backward(const RunContext& ctx, float loss_scale, const Tensor& dx);

  // The last Forward's [N, vocab] logits when it computed them whole (no targets, or one chunk),
  // until Backward overwrites them with their gradient; else empty.
  Tensor logits() const;

  // Device bytes Forward holds for `tokens` rows (logits buffer + lse), as allocated before the
  // device's rounding; logits_only: a Forward without targets.
  static uint64_t ScratchBytes(int64_t tokens, int64_t hidden, int64_t vocab, int64_t chunk_tokens,
                               bool logits_only = false);
  // Rows per chunk for `tokens` rows (chunk_tokens as the constructor takes it).
  static int64_t RowsPerChunk(int64_t tokens, int64_t hidden, int64_t vocab, int64_t chunk_tokens);

 private:
  Status Grow(const RunContext& ctx, DeviceBuffer* b, size_t bytes, const char* what);
  Status ChunkLogits(const RunContext& ctx, int64_t r0, int64_t rows);

  Device* device_;
  Linear* head_;
  int64_t chunk_tokens_;
  DeviceBuffer logits_, lse_;
  Tensor x_;
  const int32_t* targets_ = nullptr;
  int64_t num_valid_ = 0, tokens_ = 0, rows_per_chunk_ = 0;
  int64_t resident_chunk_ = -1;  // the chunk whose logits are in the buffer
  bool whole_ = false;           // logits_ holds all N rows of the last Forward
  bool ready_for_backward_ = false;
};

}  // namespace strata::nn
