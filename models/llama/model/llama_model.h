// LlamaForCausalLM: the Hugging Face Llama (transformers' LlamaForCausalLM math) on nn/ —
// embedding, N decoder layers (RMSNorm → self-attention with RoPE and grouped-query heads →
// residual, RMSNorm → SwiGLU MLP → residual), final RMSNorm, LM head (tied to the embedding or
// not) — with explicit forward and backward. Knows nothing of ZeRO: the engine sees it as an
// nn::CausalLM (parameters, hooks, token-batch forward/backward).
//
// Parameter names and shapes are exactly Hugging Face's, in the order of its
// named_parameters():
//   model.embed_tokens.weight                     [vocab, hidden]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight   q,o: [hidden, hidden];
//                                                 k,v: [kv_heads * head_dim, hidden]
//   model.layers.{i}.mlp.{gate,up}_proj.weight    [intermediate, hidden]
//   model.layers.{i}.mlp.down_proj.weight         [hidden, intermediate]
//   model.layers.{i}.input_layernorm.weight       [hidden]
//   model.layers.{i}.post_attention_layernorm.weight  [hidden]
//   model.norm.weight                             [hidden]
//   lm_head.weight                                [vocab, hidden]   (absent when tied)
// (Within a layer the order is self_attn, mlp, input_layernorm, post_attention_layernorm, as
// transformers declares them.) Weights of a Linear are [out_features, in_features], y = x W^T.
//
// Storage: by default the model allocates all parameters and fp32 gradients in two flat device
// buffers and initialises them as transformers does (normal(0, 0.02) for embedding and linear
// weights, norms 1) from `seed`. With allocate_parameters = false it allocates nothing: the
// owner (the engine, a checkpoint loader) places each Parameter's data and grad
// (Parameter::set_data / set_grad) before running. Parameter storage is memory of `device`; to
// load or save by name use NamedParameters() / FindParameter() with nn::UploadParameter /
// nn::DownloadParameter (which convert F32/F16/BF16).
//
// Activations are fp32; parameters may be stored in fp32, fp16 or bf16 (converted to fp32 for
// compute, gradients accumulated in grad_dtype).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "models/llama/config/llama_config.h"
#include "nn/modules/layers/linear.h"
#include "nn/modules/lm/causal_lm.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/device.h"

namespace strata::llama {

class LlamaModel;  // "model": embed_tokens, layers, norm (llama_layers.h)

struct LlamaModelOptions {
  // Parameter storage dtype (fp32, fp16 or bf16).
  DType dtype = DType::kFloat32;
  // Allocate parameters (+ gradients in grad_dtype) in flat device buffers owned by the model.
  bool allocate_parameters = true;
  bool allocate_grads = true;
  DType grad_dtype = DType::kFloat32;
  // Random initialisation when the model allocates: normal(0, init_std) by seed, norms = 1.
  uint64_t seed = 0;
  double init_std = 0.02;
  // Activation checkpointing (DeepSpeed's activation_checkpointing): each decoder layer keeps
  // only its input and recomputes its forward inside its backward. cpu_checkpointing keeps those
  // inputs in pinned CPU memory instead of device memory.
  bool activation_checkpointing = false;
  bool cpu_checkpointing = false;  // requires activation_checkpointing
  // The LM head and loss run in chunks of this many tokens (nn/modules/lm/lm_head_loss.h), so at
  // most chunk x vocab logits exist; logits() is then empty after a Forward with labels. 0: all
  // tokens at once (logits kept whole until Backward); nn::LmHeadLoss::kAutoChunk (-1): its rule.
  int64_t lm_head_chunk_tokens = 0;
};

class LlamaForCausalLM final : public nn::CausalLM {
 public:
  // InvalidArgument naming the config field for shapes it cannot run (hidden_size not a multiple
  // of num_attention_heads, heads not a multiple of num_key_value_heads, odd head_dim, ...);
  // OutOfMemory (device) if the parameters do not fit.
  static Result<std::unique_ptr<LlamaForCausalLM>> Create(const LlamaConfig& config, Device* device,
                                                          const LlamaModelOptions& options = {});
  ~LlamaForCausalLM() override;

  const char* type_name() const override { return "LlamaForCausalLM"; }
  const LlamaConfig& config() const { return config_; }
  const LlamaModelOptions& options() const { return options_; }
  Device* device() const { return device_; }

  // nn::CausalLM. Activation buffers are allocated on the first Forward of a larger batch shape
  // and reused; batch.seq_len must not exceed max_position_embeddings, but for dynamic RoPE
  // (llama_rope.h), whose frequencies follow the length of the sequence computed. Position ids
  // are 0..seq_len-1 for every sequence (transformers' default) unless the batch gives them.
  // MistralForCausalLM's sliding window narrows every query's keys to the last sliding_window
  // positions (of its own example, when packed). logits() stay valid until Backward,
  // which overwrites them with their gradient; they are empty when the head ran in chunks
  // (options().lm_head_chunk_tokens below the batch's tokens, with labels).
  Status Forward(const nn::RunContext& ctx, const nn::TokenBatch& batch) override;
  Status Backward(const nn::RunContext& ctx, float loss_scale = 1.0f) override;
  nn::Tensor logits() const override;
  const float* loss_device() const override;

  // Zeroes every parameter's gradient slot (synchronous), when the model allocated them.
  Status ZeroGrads(const nn::RunContext& ctx);
  // Re-initialises all parameters from `seed` as Create does (they must be placed).
  Status InitializeParameters(const nn::RunContext& ctx, uint64_t seed);

  LlamaModel& model() { return *model_; }
  // The RoPE tables ([max_position_embeddings, head_dim / 2] fp32, device), for inference.
  const float* rope_cos() const;
  const float* rope_sin() const;
  nn::Linear& lm_head();  // its weight is the embedding's when tied

 private:
  LlamaForCausalLM(const LlamaConfig& config, Device* device, const LlamaModelOptions& options);
  Status Init();
  Status EnsureBuffers(const nn::RunContext& ctx, int64_t batch, int64_t seq_len);
  // Points the layers at the RoPE tables for this batch's positions (dynamic RoPE: rebuilt for
  // a length past max_position_embeddings).
  Status SelectRope(const nn::RunContext& ctx);
  nn::Tensor Hidden(int64_t layer) const;

  struct Impl;
  LlamaConfig config_;
  LlamaModelOptions options_;
  Device* device_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::llama
