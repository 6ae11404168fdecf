// LlamaDecoder: the inference forward of a LlamaForCausalLM with a KV cache on the device tier
// (infer::CachedLm). It runs the model's own modules (embedding, norms, projections, MLP) through
// their Forward, so the hooks a ZeRO-3 engine installs gather each module's parameters from its
// tier as in training; only attention differs: the new tokens' keys and values go into the cache
// and the queries attend to it (nn::CachedAttention). The training forward is untouched.
//
// The cache is fixed per sequence: [layers][K, V][max_batch, rows, kv_heads, head_dim] fp32,
// planned by PlanLlamaKvCache before anything is allocated (rows = max_len but for a sliding
// window, below). Prompts of different lengths are right-padded to the longest; a padded row's
// key/value is not written to the cache, and its output is discarded.
//
// Note [Rolling cache]
// Mistral's sliding_window W: a query at position p attends to positions j with p - W < j <= p,
// the mask the training forward builds (LlamaForCausalLM::Forward narrows
// AttentionArgs::row_start to i - W + 1) and transformers' (i - j < W). When max_len exceeds W the
// cache is rolling (nn::CachedAttentionArgs::window): position j lives in row j % rows, and rows
// = min(max_len, 2W - 1): a decode step needs the W - 1 positions before it, and a prefill runs
// in chunks of at most W tokens per sequence (each a forward pass; ZeRO-Inference reads the
// weights once per chunk), whose first token needs the W - 1 positions before the chunk and the
// chunk's own W. The workspace is planned for one chunk. Both count in the plan.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "models/infer/cached_lm.h"
#include "models/llama/model/llama_model.h"

namespace strata::llama {

// The device bytes a decoder for `max_batch` sequences of up to `max_len` positions takes.
infer::KvCachePlan PlanLlamaKvCache(const LlamaConfig& config, int64_t max_batch, int64_t max_len);

class LlamaDecoder final : public infer::CachedLm {
 public:
  // `model` must outlive the decoder, its parameters placed (by the model or an engine).
  // InvalidArgument naming max_len when it exceeds max_position_embeddings (but for
  // rope_scaling "dynamic", whose frequencies follow the length as transformers' do under a KV
  // cache: Note [Dynamic RoPE with a cache]), or a non-positive size; OutOfMemory (device)
  // naming the buffer when the plan does not fit.
  static Result<std::unique_ptr<LlamaDecoder>> Create(LlamaForCausalLM* model, int64_t max_batch,
                                                      int64_t max_len);
  ~LlamaDecoder() override;

  int64_t vocab_size() const override { return model_->config().vocab_size; }
  const infer::KvCachePlan& plan() const override { return plan_; }
  uint64_t allocated_bytes() const override;
  Status Prefill(const nn::RunContext& ctx, const std::vector<std::vector<int32_t>>& prompts,
                 std::vector<float>* logits) override;
  Status Decode(const nn::RunContext& ctx, std::span<const int32_t> tokens,
                std::vector<float>* logits) override;
  const std::vector<int64_t>& lengths() const override { return lengths_; }
  void Release() override;

 private:
  struct Buffers;
  LlamaDecoder(LlamaForCausalLM* model, const infer::KvCachePlan& plan);
  Status Allocate();
  // Runs `batch` x `seq` tokens (ids and positions staged in host_ids_/host_pos_; the first
  // host_write_[b] of sequence b are real, the rest padding) through the model; `last[b]` is the
  // row of sequence b whose logits are wanted.
  Status Run(const nn::RunContext& ctx, int64_t batch, int64_t seq,
             const std::vector<int64_t>& last, std::vector<float>* logits);
  // Dynamic RoPE past max_position_embeddings (Note [Dynamic RoPE with a cache] in the .cc):
  // points *cos / *sin / *rows at tables holding this forward's positions; leaves them (the
  // model's tables) otherwise.
  Status SelectDynamicRope(const Stream& s, const float** cos, const float** sin, int64_t* rows);

  LlamaForCausalLM* model_;
  infer::KvCachePlan plan_;
  std::unique_ptr<Buffers> buf_;
  std::vector<int64_t> lengths_;
  std::vector<int32_t> host_ids_, host_pos_;
  std::vector<int64_t> host_write_;
};

}  // namespace strata::llama
