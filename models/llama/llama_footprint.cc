#include "models/llama/llama_footprint.h"

#include <algorithm>
#include <string>
#include <utility>

#include "nn/modules/lm/lm_head_loss.h"

namespace strata::llama {
namespace {

// As the device arena rounds (DeviceArena::kAlignment).
uint64_t Dev(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256; }
uint64_t Pinned(uint64_t bytes) {
  const uint64_t a = bytes >= (uint64_t{2} << 20) ? (uint64_t{2} << 20) : 4096;
  return (bytes + a - 1) / a * a;
}

// One micro-batch's buffers (llama_model.cc EnsureBuffers, llama_layers.cc AllocateActivations /
// AllocateGrads, one RmsNorm rstd per norm), in bytes as allocated.
ActivationBytes LlamaActivations(const LlamaConfig& c, uint64_t b, uint64_t s, bool checkpointing,
                                 bool cpu_checkpointing, int64_t head_chunk) {
  const uint64_t n = b * s, h = static_cast<uint64_t>(c.hidden_size), f = 4;
  const uint64_t kv = static_cast<uint64_t>(c.num_key_value_heads * c.head_dim());
  const uint64_t in = static_cast<uint64_t>(c.intermediate_size);
  const uint64_t v = static_cast<uint64_t>(c.vocab_size);
  const uint64_t heads = static_cast<uint64_t>(c.num_attention_heads);
  const uint64_t layers = static_cast<uint64_t>(c.num_hidden_layers);
  const uint64_t qd = static_cast<uint64_t>(c.num_attention_heads * c.head_dim());
  const bool cpu_ckpt = checkpointing && cpu_checkpointing;
  // norm1, h1, norm2; q, attention output; k, v; probs; gate, up, act (+ Qwen3's q, k before
  // their norms).
  uint64_t layer_acts = 3 * Dev(n * h * f) + 2 * Dev(n * qd * f) + 2 * Dev(n * kv * f) +
                        Dev(b * heads * s * s * f) + 3 * Dev(n * in * f);
  if (c.qk_norm) layer_acts += Dev(n * qd * f) + Dev(n * kv * f);
  // d_norm, d_tmp, d_h1, y_scratch; d_attn, dq; d_act; dk, dv; scratch.
  const uint64_t grads = 4 * Dev(n * h * f) + 2 * Dev(n * qd * f) + Dev(n * in * f) +
                         2 * Dev(n * kv * f) + Dev(s * s * f);
  ActivationBytes a;
  a.device_bytes += 3 * Dev(n * 4);                                // ids, labels, positions
  a.device_bytes += (cpu_ckpt ? 2 : layers + 1) * Dev(n * h * f);  // hidden states
  a.device_bytes += (checkpointing ? 1 : layers) * layer_acts;
  a.device_bytes += grads;
  // The head's logits are one chunk's (nn/modules/lm/lm_head_loss.h), lse one float a token.
  const uint64_t head_rows = static_cast<uint64_t>(nn::LmHeadLoss::RowsPerChunk(
      static_cast<int64_t>(n), c.hidden_size, c.vocab_size, head_chunk));
  a.device_bytes +=
      Dev(n * h * f) + Dev(head_rows * v * f) + Dev(n * f) + Dev(f);  // norm, logits, lse, loss
  a.device_bytes += 3 * Dev(n * h * f);                               // d_final_norm, d_hidden x 2
  a.device_bytes += (2 * layers + 1) * Dev(n * f);                    // RmsNorm rstd
  if (c.qk_norm) {  // q_norm / k_norm rstd: one float per token and head
    const uint64_t kvh = static_cast<uint64_t>(c.num_key_value_heads);
    a.device_bytes += layers * (Dev(n * heads * f) + Dev(n * kvh * f));
  }
  if (c.qkv_bias) a.device_bytes += 3 * layers * Dev(n * f);  // each biased Linear's ones
  if (cpu_ckpt && layers > 0) a.pinned_bytes = Pinned(n * h * f) * layers;
  a.host_bytes = 5 * n * 4;  // the model's ids / positions / labels, the loop's ids / labels
  return a;
}

}  // namespace

ModelShape LlamaFootprint(const LlamaConfig& c, int64_t micro_batch, int64_t seq_len,
                          bool cpu_checkpointing, std::string name, int64_t lm_head_chunk_tokens) {
  ModelShape m;
  m.name = std::move(name);
  const uint64_t h = static_cast<uint64_t>(c.hidden_size);
  const uint64_t kv = static_cast<uint64_t>(c.num_key_value_heads * c.head_dim());
  const uint64_t in = static_cast<uint64_t>(c.intermediate_size);
  const uint64_t v = static_cast<uint64_t>(c.vocab_size);
  const uint64_t q = static_cast<uint64_t>(c.num_attention_heads * c.head_dim());
  m.param_numels.push_back(v * h);  // embed_tokens
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // self_attn q, k, v (each with its bias in Qwen2), o (then Qwen3's q_norm, k_norm); mlp
    // gate, up, down; input_layernorm, post_attention_layernorm (transformers' order).
    for (uint64_t n : {q * h, kv * h, kv * h}) {
      m.param_numels.push_back(n);
      if (c.qkv_bias) m.param_numels.push_back(n / h);
    }
    m.param_numels.push_back(h * q);
    if (c.qk_norm) {
      m.param_numels.push_back(static_cast<uint64_t>(c.head_dim()));
      m.param_numels.push_back(static_cast<uint64_t>(c.head_dim()));
    }
    for (uint64_t n : {in * h, in * h, h * in, h, h}) m.param_numels.push_back(n);
  }
  m.param_numels.push_back(h);                                  // model.norm
  if (!c.tie_word_embeddings) m.param_numels.push_back(v * h);  // lm_head
  m.fixed_device_bytes =
      2 * Dev(static_cast<uint64_t>(c.max_position_embeddings * (c.head_dim() / 2)) * 4);
  const uint64_t b = static_cast<uint64_t>(std::max<int64_t>(micro_batch, 1));
  const uint64_t s = static_cast<uint64_t>(std::max<int64_t>(seq_len, 1));
  if (c.rope_scaling.type == RopeType::kDynamic && seq_len > c.max_position_embeddings) {
    // Dynamic RoPE past max_position_embeddings: the model's tables for this length too.
    m.fixed_device_bytes += 2 * Dev(s * static_cast<uint64_t>(c.head_dim() / 2) * 4);
  }
  m.activations = LlamaActivations(c, b, s, false, false, lm_head_chunk_tokens);
  m.activations_checkpointed =
      LlamaActivations(c, b, s, true, cpu_checkpointing, lm_head_chunk_tokens);
  m.activation_note = "micro batch " + std::to_string(b) + " x seq " + std::to_string(s);
  const int64_t rows = nn::LmHeadLoss::RowsPerChunk(static_cast<int64_t>(b * s), c.hidden_size,
                                                    c.vocab_size, lm_head_chunk_tokens);
  if (rows < static_cast<int64_t>(b * s)) {
    m.activation_note += ", LM head in chunks of " + std::to_string(rows) + " tokens";
  }
  return m;
}

}  // namespace strata::llama
