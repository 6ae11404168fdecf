// CausalLM: the model-agnostic face of a decoder-only language model, as the engine drives it:
// a module tree (parameters, hooks) plus token-batch forward (logits, mean loss) and backward.
//
// Token ids and labels are host int32 arrays [batch, seq_len] (labels as in Hugging Face: the
// model shifts them, so position t is scored against labels[t + 1]; -100 is ignored). The model
// copies them to its device before Forward returns, so the caller may reuse them at once.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "nn/modules/layers/module.h"
#include "nn/ops/ops.h"
#include "nn/tensor/tensor.h"

namespace strata::nn {

struct TokenBatch {
  std::span<const int32_t> input_ids;  // batch * seq_len
  std::span<const int32_t> labels;     // batch * seq_len, or empty: logits only, no loss
  int64_t batch = 0;
  int64_t seq_len = 0;
  // Packing (both optional, batch * seq_len each). segment_ids marks the examples packed into a
  // row (contiguous runs; attention never crosses them, and an example's first label is not
  // scored from the example before it); position_ids feed the rotary embedding. Without
  // position_ids, positions count from 0 at each example's start (each row's start without
  // segment_ids). See nn/modules/packed_layout.h.
  std::span<const int32_t> position_ids;
  std::span<const int32_t> segment_ids;
};

class CausalLM : public Module {
 public:
  using Module::Module;

  // Enqueues the forward pass. With labels, the loss is the mean cross-entropy over the shifted
  // labels that are not -100 (0 if there are none). Saves what Backward needs when
  // ctx.save_for_backward.
  virtual Status Forward(const RunContext& ctx, const TokenBatch& batch) = 0;
  // Enqueues the backward pass of the last Forward (which must have had labels), with
  // d(loss) = loss_scale (1 for plain training; the fp16 loss scale; 1/accumulation steps...).
  // Adds into every parameter's grad slot that is set.
  virtual Status Backward(const RunContext& ctx, float loss_scale = 1.0f) = 0;

  // The last forward's logits [batch, seq_len, vocab], fp32 device memory owned by the model,
  // valid until the next Forward. Empty if logits were not kept (see the model's options).
  virtual Tensor logits() const = 0;
  // The last forward's loss (one fp32 in device memory) — read after synchronizing the stream.
  virtual const float* loss_device() const = 0;
  // Synchronizes ctx.stream and returns the last loss.
  Result<float> ReadLoss(const RunContext& ctx) const;
};

}  // namespace strata::nn
