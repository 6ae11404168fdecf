#include "nn/modules/lm/lm_head_loss.h"

#include <algorithm>
#include <string>

#include "nn/ops/ops.h"

namespace strata::nn {

LmHeadLoss::LmHeadLoss(Device* device, Linear* head, int64_t chunk_tokens)
    : device_(device),
      head_(head),
      chunk_tokens_(chunk_tokens == kAutoChunk ? kAutoChunk : std::max<int64_t>(chunk_tokens, 0)) {}

Status LmHeadLoss::set_chunk_tokens(int64_t chunk_tokens) {
  if (chunk_tokens < 0 && chunk_tokens != kAutoChunk) {
    return InvalidArgumentError("lm_head chunk: " + std::to_string(chunk_tokens) +
                                " tokens; allowed: 0 (all tokens at once), a positive count or "
                                "auto");
  }
  chunk_tokens_ = chunk_tokens;
  return Status::Ok();
}

int64_t LmHeadLoss::RowsPerChunk(int64_t tokens, int64_t hidden, int64_t vocab,
                                 int64_t chunk_tokens) {
  if (chunk_tokens == kAutoChunk) {
    if (tokens * vocab <= kAutoWholeFloats) return tokens;
    const int64_t rows = std::max(kAutoMinRows, (tokens * hidden + vocab - 1) / vocab);
    return std::min(tokens, (rows + 63) / 64 * 64);
  }
  return chunk_tokens <= 0 ? tokens : std::min(tokens, chunk_tokens);
}

uint64_t LmHeadLoss::ScratchBytes(int64_t tokens, int64_t hidden, int64_t vocab,
                                  int64_t chunk_tokens, bool logits_only) {
  const int64_t rows = logits_only ? tokens : RowsPerChunk(tokens, hidden, vocab, chunk_tokens);
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(vocab) * sizeof(float) +
         static_cast<uint64_t>(tokens) * sizeof(float);
}

Status LmHeadLoss::Grow(const RunContext& ctx, DeviceBuffer* b, size_t bytes, const char* what) {
  if (b->size() >= bytes) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());  // earlier work may still use it
  b->Reset();
  STRATA_ASSIGN_OR_RETURN(*b,
                          DeviceBuffer::Allocate(device_, bytes, std::string("lm_head ") + what));
  return Status::Ok();
}

Tensor LmHeadLoss::logits() const {
  if (!whole_ || logits_.data() == nullptr) return Tensor();
  return logits_.AsTensor(DType::kFloat32, Shape{tokens_, head_->weight().shape()[0]});
}

// logits_ [rows, V] = x[r0 : r0 + rows] W^T
Status LmHeadLoss::ChunkLogits(const RunContext& ctx, int64_t r0, int64_t rows) {
  Parameter& w = head_->weight();
  const int64_t vocab = w.shape()[0], hidden = w.shape()[1];
  GemmArgs g;
  g.trans_b = true;
  g.m = rows, g.n = vocab, g.k = hidden;
  g.a = static_cast<const float*>(x_.data) + r0 * hidden, g.lda = hidden;
  g.b = w.data(), g.b_dtype = w.dtype(), g.ldb = hidden;
  g.c = logits_.data(), g.ldc = vocab;
  return Gemm(ctx.stream, g);
}

Status LmHeadLoss::Forward(const RunContext& ctx, const Tensor& x, const int32_t* targets,
                           int64_t num_valid, float* loss) {
  Parameter& w = head_->weight();
  const int64_t vocab = w.shape()[0], hidden = w.shape()[1];
  const int64_t n = x.numel() / hidden;
  if (n <= 0 || x.numel() != n * hidden || x.dtype != DType::kFloat32) {
    return InvalidArgumentError(head_->name() + ": x " + x.shape.ToString() +
                                " is not fp32 [tokens, " + std::to_string(hidden) + "]");
  }
  if (targets != nullptr && loss == nullptr) {
    return InvalidArgumentError(head_->name() + ": targets given without a loss slot");
  }
  ready_for_backward_ = false;
  x_ = x;
  targets_ = targets;
  num_valid_ = num_valid;
  tokens_ = n;
  rows_per_chunk_ = targets == nullptr ? n : RowsPerChunk(n, hidden, vocab, chunk_tokens_);
  whole_ = rows_per_chunk_ == n;
  const size_t f = sizeof(float);
  STRATA_RETURN_IF_ERROR(
      Grow(ctx, &logits_, static_cast<size_t>(rows_per_chunk_ * vocab) * f, "logits"));
  if (targets != nullptr) {
    STRATA_RETURN_IF_ERROR(Grow(ctx, &lse_, static_cast<size_t>(n) * f, "logsumexp"));
  }
  STRATA_RETURN_IF_ERROR(WithForwardHooks(*head_, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(w.CheckPlaced(head_->name().c_str()));  // gathered by the hooks
    for (int64_t r0 = 0, c = 0; r0 < n; r0 += rows_per_chunk_, ++c) {
      const int64_t rows = std::min(rows_per_chunk_, n - r0);
      STRATA_RETURN_IF_ERROR(ChunkLogits(ctx, r0, rows));
      resident_chunk_ = c;
      if (targets == nullptr) continue;
      CrossEntropyArgs a;
      a.batch = 1, a.seq = rows, a.vocab = vocab;
      a.logits = logits_.f32();
      a.labels = targets + r0;
      a.num_valid = num_valid;
      a.lse = lse_.f32() + r0;
      a.loss = loss;
      a.labels_shifted = true;
      a.accumulate_loss = c > 0;
      STRATA_RETURN_IF_ERROR(CrossEntropyForward(ctx.stream, a));
    }
    return Status::Ok();
  }));
  ready_for_backward_ = targets != nullptr && ctx.save_for_backward;
  return Status::Ok();
}

Status LmHeadLoss::Backward(const RunContext& ctx, float loss_scale, const Tensor& dx) {
  if (!ready_for_backward_) {
    return FailedPreconditionError(head_->name() +
                                   ": backward needs a Forward with targets first (one each)");
  }
  ready_for_backward_ = false;
  Parameter& w = head_->weight();
  const int64_t vocab = w.shape()[0], hidden = w.shape()[1], n = tokens_;
  if (!dx.empty() && dx.numel() != n * hidden) {
    return InvalidArgumentError(head_->name() + ": dx " + dx.shape.ToString() + " is not [" +
                                std::to_string(n) + ", " + std::to_string(hidden) + "]");
  }
  return WithBackwardHooks(*head_, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(w.CheckPlaced(head_->name().c_str()));
    const int64_t chunks = (n + rows_per_chunk_ - 1) / rows_per_chunk_;
    // A fresh fp32 slot is written by the first chunk (beta 0), then accumulated into; a 16-bit
    // one is zeroed first and accumulated (Linear's rule, Note [Fresh gradient slots]).
    bool write = w.grad() != nullptr && w.grad_fresh() && w.grad_dtype() == DType::kFloat32;
    if (w.grad() != nullptr && !write) STRATA_RETURN_IF_ERROR(ZeroGradIfFresh(ctx.stream, w));
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t r0 = c * rows_per_chunk_, rows = std::min(rows_per_chunk_, n - r0);
      if (c != resident_chunk_) STRATA_RETURN_IF_ERROR(ChunkLogits(ctx, r0, rows));
      resident_chunk_ = -1;  // the buffer now holds gradients
      CrossEntropyArgs a;
      a.batch = 1, a.seq = rows, a.vocab = vocab;
      a.logits = logits_.f32();
      a.labels = targets_ + r0;
      a.num_valid = num_valid_;
      a.lse = lse_.f32() + r0;
      a.loss_scale = loss_scale;
      a.labels_shifted = true;
      STRATA_RETURN_IF_ERROR(CrossEntropyBackward(ctx.stream, a));
      if (!dx.empty()) {
        GemmArgs g;  // dx_c [rows, H] = dlogits_c [rows, V] W [V, H]
        g.m = rows, g.n = hidden, g.k = vocab;
        g.a = logits_.data(), g.lda = vocab;
        g.b = w.data(), g.b_dtype = w.dtype(), g.ldb = hidden;
        g.c = static_cast<float*>(dx.data) + r0 * hidden, g.ldc = hidden;
        STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
      }
      if (w.grad() != nullptr) {
        GemmArgs g;  // dW [V, H] (+)= dlogits_c^T [V, rows] x_c [rows, H]
        g.trans_a = true;
        g.m = vocab, g.n = hidden, g.k = rows;
        g.a = logits_.data(), g.lda = vocab;
        g.b = static_cast<const float*>(x_.data) + r0 * hidden, g.ldb = hidden;
        g.c = w.grad(), g.c_dtype = w.grad_dtype(), g.ldc = hidden;
        g.beta = write ? 0.0f : 1.0f;
        STRATA_RETURN_IF_ERROR(Gemm(ctx.stream, g));
        write = false;
        w.mark_grad_written();
      }
    }
    return Status::Ok();
  });
}

}  // namespace strata::nn
