// CachedLm: what generation needs from a model family's inference forward — a forward with a KV
// cache over a batch of sequences of different lengths (models/llama/model/llama_decode.h
// implements it for Llama). The generator (generator.h) and the `strata generate` tool drive it and
// never see a family.
//
// Sequences are rows 0..batch-1 of the cache; each has its own length. Prefill starts them from
// their prompts; each Decode appends one token to every sequence (a finished one too: the caller
// ignores its logits). Logits come back to host memory, [batch, vocab] row-major, for the last
// token of each sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "nn/modules/layers/module.h"

namespace strata::infer {

// What a KV cache and the inference activations cost on the device tier, planned before any of it
// is allocated.
struct KvCachePlan {
  int64_t max_batch = 0;  // sequences
  int64_t max_len = 0;    // positions per sequence (prompt + new tokens)
  // Positions kept per sequence: max_len, or fewer in a rolling cache (a sliding window: the
  // window and one prefill chunk).
  int64_t cache_rows = 0;
  // The most tokens per sequence in one forward: max_len, or a sliding window's length (a longer
  // prompt runs in chunks, each a forward pass).
  int64_t prefill_chunk = 0;
  uint64_t cache_bytes = 0;      // K and V of every layer: 2 * layers * batch * rows * kv_dim * 4
  uint64_t workspace_bytes = 0;  // activations of one forward of batch * chunk tokens, logits
  uint64_t total_bytes() const { return cache_bytes + workspace_bytes; }
};

class CachedLm {
 public:
  virtual ~CachedLm() = default;
  virtual int64_t vocab_size() const = 0;
  virtual const KvCachePlan& plan() const = 0;
  // Device bytes this object holds now (cache + workspace; 0 after Release).
  virtual uint64_t allocated_bytes() const = 0;

  // Starts prompts.size() (1..max_batch) sequences from their prompts (each 1..max_len tokens),
  // runs them as one padded batch and writes each prompt's last-token logits to `logits`.
  virtual Status Prefill(const nn::RunContext& ctx,
                         const std::vector<std::vector<int32_t>>& prompts,
                         std::vector<float>* logits) = 0;
  // Appends tokens[b] to sequence b (tokens.size() == the batch Prefill started) and writes the
  // logits of the new tokens. InvalidArgument naming max_len when a sequence is full.
  virtual Status Decode(const nn::RunContext& ctx, std::span<const int32_t> tokens,
                        std::vector<float>* logits) = 0;
  // Current length (prompt + appended tokens) of each sequence.
  virtual const std::vector<int64_t>& lengths() const = 0;
  // Frees the cache and workspace (the device memory goes back; Prefill allocates it again).
  virtual void Release() = 0;

  // Called after every forward pass (Prefill, Decode) once its modules have run: ZeRO-Inference
  // (engine/zero_inference.h) closes its pass there.
  void set_on_pass_end(std::function<Status()> fn) { on_pass_end_ = std::move(fn); }

 protected:
  std::function<Status()> on_pass_end_;
};

}  // namespace strata::infer
