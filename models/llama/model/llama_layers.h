// The modules inside LlamaForCausalLM (transformers' LlamaAttention, LlamaMLP,
// LlamaDecoderLayer, LlamaModel) and the activation workspaces they run in.
//
// Buffers: a decoder layer's intermediate activations live in a LayerActivations — one per layer,
// or one shared by all layers under activation checkpointing (each layer then keeps only its
// input and recomputes the rest inside its backward). Gradient temporaries live in one
// LayerGrads shared by all layers. The owner (LlamaForCausalLM) sizes both for the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/llama/config/llama_config.h"
#include "nn/modules/layers/embedding.h"
#include "nn/modules/layers/linear.h"
#include "nn/modules/layers/module_list.h"
#include "nn/modules/layers/rms_norm.h"
#include "nn/ops/ops.h"
#include "nn/tensor/device_buffer.h"

namespace strata::llama {

// What every layer of one forward needs to know about the batch (set by the owner per Forward).
struct LlamaBatchInfo {
  int64_t batch = 0, seq = 0;
  const int32_t* positions = nullptr;  // [batch * seq] device
  const int32_t* row_start = nullptr;  // [batch * seq] device, or nullptr: attention from key 0
  const float* rope_cos = nullptr;     // [max_pos, head_dim / 2] device
  const float* rope_sin = nullptr;
  int64_t max_pos = 0;
  int64_t tokens() const { return batch * seq; }
};

struct LayerActivations {
  nn::DeviceBuffer norm1, q, k, v, probs, attn, h1, norm2, gate, up, act;
  nn::DeviceBuffer q_raw, k_raw;  // q_proj / k_proj outputs before q_norm / k_norm (Qwen3 only)
};
struct LayerGrads {
  nn::DeviceBuffer d_norm, d_tmp, d_h1, d_act, d_attn, dq, dk, dv, scratch, y_scratch;
};

// Allocates `a` for `info`'s batch (OutOfMemory naming the buffer).
Status AllocateActivations(Device* device, const LlamaConfig& c, const LlamaBatchInfo& info,
                           LayerActivations* a);
Status AllocateGrads(Device* device, const LlamaConfig& c, const LlamaBatchInfo& info,
                     LayerGrads* g);

class LlamaAttention final : public nn::UnaryModule {
 public:
  LlamaAttention(const LlamaConfig& c, DType dtype, const LlamaBatchInfo* info);
  const char* type_name() const override { return "LlamaAttention"; }
  void set_workspace(LayerActivations* a, LayerGrads* g) { acts_ = a, grads_ = g; }

  nn::Linear q_proj, k_proj, v_proj, o_proj;
  // Qwen3 (config.qk_norm): RMSNorm over head_dim on each head of q and k, before RoPE; null
  // otherwise.
  std::unique_ptr<nn::RmsNorm> q_norm, k_norm;

 protected:
  // x [N, hidden] (normed) -> y [N, hidden] (o_proj output)
  Status DoForward(const nn::RunContext& ctx, const nn::Tensor& x, const nn::Tensor& y) override;
  Status DoBackward(const nn::RunContext& ctx, const nn::Tensor& dy, const nn::Tensor& dx) override;

 private:
  nn::AttentionArgs Args() const;
  const LlamaConfig& c_;
  const LlamaBatchInfo* info_;
  LayerActivations* acts_ = nullptr;
  LayerGrads* grads_ = nullptr;
};

class LlamaMLP final : public nn::UnaryModule {
 public:
  LlamaMLP(const LlamaConfig& c, DType dtype);
  const char* type_name() const override { return "LlamaMLP"; }
  void set_workspace(LayerActivations* a, LayerGrads* g) { acts_ = a, grads_ = g; }

  nn::Linear gate_proj, up_proj, down_proj;

 protected:
  // x [N, hidden] -> y [N, hidden]; backward overwrites the saved gate/up with their gradients.
  Status DoForward(const nn::RunContext& ctx, const nn::Tensor& x, const nn::Tensor& y) override;
  Status DoBackward(const nn::RunContext& ctx, const nn::Tensor& dy, const nn::Tensor& dx) override;

 private:
  const LlamaConfig& c_;
  LayerActivations* acts_ = nullptr;
  LayerGrads* grads_ = nullptr;
};

class LlamaDecoderLayer final : public nn::UnaryModule {
 public:
  LlamaDecoderLayer(int64_t index, const LlamaConfig& c, DType dtype, const LlamaBatchInfo* info);
  const char* type_name() const override { return "LlamaDecoderLayer"; }
  // `recompute`: activation checkpointing (the forward's intermediates are not kept).
  void set_workspace(LayerActivations* a, LayerGrads* g, bool recompute);

  LlamaAttention self_attn;
  LlamaMLP mlp;
  nn::RmsNorm input_layernorm, post_attention_layernorm;

 protected:
  // x [N, hidden] -> y [N, hidden]; x must hold the same values at Backward (the caller keeps
  // or restores it).
  Status DoForward(const nn::RunContext& ctx, const nn::Tensor& x, const nn::Tensor& y) override;
  Status DoBackward(const nn::RunContext& ctx, const nn::Tensor& dy, const nn::Tensor& dx) override;

 private:
  Status Body(const nn::RunContext& ctx, const nn::Tensor& x, const nn::Tensor& y);
  const LlamaConfig& c_;
  const LlamaBatchInfo* info_;
  LayerActivations* acts_ = nullptr;
  LayerGrads* grads_ = nullptr;
  bool recompute_ = false;
  nn::Tensor x_;
};

// "model": embed_tokens, layers.{i}, norm. Its forward/backward are driven by LlamaForCausalLM.
class LlamaModel final : public nn::Module {
 public:
  LlamaModel(const LlamaConfig& c, DType dtype, const LlamaBatchInfo* info);
  const char* type_name() const override { return "LlamaModel"; }

  nn::Embedding embed_tokens;
  nn::ModuleList layers;
  std::vector<std::unique_ptr<LlamaDecoderLayer>> layer;
  nn::RmsNorm norm;
};

}  // namespace strata::llama
