#include "models/llama/model/llama_layers.h"

#include <cmath>
#include <string>

#include "nn/ops/ops.h"
#include "offload/device/api/kernels.h"

namespace strata::llama {
namespace {

using nn::Shape;
using nn::Tensor;

Tensor F32(const nn::DeviceBuffer& b, int64_t rows, int64_t cols) {
  return b.AsTensor(DType::kFloat32, Shape{rows, cols});
}

// dst = a + b (fp32, n elements), enqueued.
Status Add(const Stream& s, const Tensor& a, const Tensor& b, const Tensor& dst) {
  return LaunchAdd(s, dst.data, DType::kFloat32, a.data, b.data, DType::kFloat32, 1.0f,
                   static_cast<size_t>(dst.numel()));
}

Status Alloc(Device* d, nn::DeviceBuffer* b, int64_t numel, const char* what) {
  const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
  if (b->size() >= bytes) return Status::Ok();
  b->Reset();
  STRATA_ASSIGN_OR_RETURN(*b, nn::DeviceBuffer::Allocate(d, bytes, std::string("llama ") + what));
  return Status::Ok();
}

}  // namespace

Status AllocateActivations(Device* d, const LlamaConfig& c, const LlamaBatchInfo& info,
                           LayerActivations* a) {
  const int64_t n = info.tokens(), h = c.hidden_size, kv = c.num_key_value_heads * c.head_dim();
  const int64_t i = c.intermediate_size, qd = c.num_attention_heads * c.head_dim();
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->norm1, n * h, "norm1"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->q, n * qd, "q"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->k, n * kv, "k"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->v, n * kv, "v"));
  if (c.qk_norm) {
    STRATA_RETURN_IF_ERROR(Alloc(d, &a->q_raw, n * qd, "q before q_norm"));
    STRATA_RETURN_IF_ERROR(Alloc(d, &a->k_raw, n * kv, "k before k_norm"));
  }
  STRATA_RETURN_IF_ERROR(Alloc(
      d, &a->probs, info.batch * c.num_attention_heads * info.seq * info.seq, "attention probs"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->attn, n * qd, "attention output"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->h1, n * h, "residual"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->norm2, n * h, "norm2"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->gate, n * i, "gate"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &a->up, n * i, "up"));
  return Alloc(d, &a->act, n * i, "mlp activation");
}

Status AllocateGrads(Device* d, const LlamaConfig& c, const LlamaBatchInfo& info, LayerGrads* g) {
  const int64_t n = info.tokens(), h = c.hidden_size, kv = c.num_key_value_heads * c.head_dim();
  const int64_t qd = c.num_attention_heads * c.head_dim();
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->d_norm, n * h, "d_norm"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->d_tmp, n * h, "d_tmp"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->d_h1, n * h, "d_h1"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->d_act, n * c.intermediate_size, "d_act"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->d_attn, n * qd, "d_attn"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->dq, n * qd, "dq"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->dk, n * kv, "dk"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->dv, n * kv, "dv"));
  STRATA_RETURN_IF_ERROR(Alloc(d, &g->scratch, info.seq * info.seq, "attention scratch"));
  return Alloc(d, &g->y_scratch, n * h, "recompute output");
}

// --- LlamaAttention ------------------------------------------------------------------------------

LlamaAttention::LlamaAttention(const LlamaConfig& c, DType dtype, const LlamaBatchInfo* info)
    : UnaryModule("self_attn"),
      q_proj("q_proj", c.hidden_size, c.num_attention_heads * c.head_dim(), dtype, c.qkv_bias),
      k_proj("k_proj", c.hidden_size, c.num_key_value_heads * c.head_dim(), dtype, c.qkv_bias),
      v_proj("v_proj", c.hidden_size, c.num_key_value_heads * c.head_dim(), dtype, c.qkv_bias),
      o_proj("o_proj", c.num_attention_heads * c.head_dim(), c.hidden_size, dtype),
      c_(c),
      info_(info) {
  RegisterModule(&q_proj);
  RegisterModule(&k_proj);
  RegisterModule(&v_proj);
  RegisterModule(&o_proj);
  if (c.qk_norm) {  // after o_proj, as transformers' Qwen3Attention declares them
    q_norm = std::make_unique<nn::RmsNorm>("q_norm", c.head_dim(), c.rms_norm_eps, dtype);
    k_norm = std::make_unique<nn::RmsNorm>("k_norm", c.head_dim(), c.rms_norm_eps, dtype);
    RegisterModule(q_norm.get());
    RegisterModule(k_norm.get());
  }
  k_proj.set_accumulate_input_grad(true);
  v_proj.set_accumulate_input_grad(true);
}

nn::AttentionArgs LlamaAttention::Args() const {
  nn::AttentionArgs a;
  a.batch = info_->batch;
  a.seq = info_->seq;
  a.heads = c_.num_attention_heads;
  a.kv_heads = c_.num_key_value_heads;
  a.head_dim = c_.head_dim();
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim())));
  a.row_start = info_->row_start;
  a.q = acts_->q.f32();
  a.k = acts_->k.f32();
  a.v = acts_->v.f32();
  a.probs = acts_->probs.f32();
  a.out = acts_->attn.f32();
  return a;
}

Status LlamaAttention::DoForward(const nn::RunContext& ctx, const Tensor& x, const Tensor& y) {
  const int64_t n = info_->tokens(), d = c_.head_dim(), h = c_.num_attention_heads * d;
  const int64_t kv = c_.num_key_value_heads * d;
  const Tensor q = F32(acts_->q, n, h), k = F32(acts_->k, n, kv), v = F32(acts_->v, n, kv);
  if (q_norm != nullptr) {  // Qwen3: q_norm / k_norm over each head, before RoPE
    const Tensor q_raw = F32(acts_->q_raw, n, h), k_raw = F32(acts_->k_raw, n, kv);
    STRATA_RETURN_IF_ERROR(q_proj.Forward(ctx, x, q_raw));
    STRATA_RETURN_IF_ERROR(q_norm->Forward(ctx, q_raw, q));
    STRATA_RETURN_IF_ERROR(k_proj.Forward(ctx, x, k_raw));
    STRATA_RETURN_IF_ERROR(k_norm->Forward(ctx, k_raw, k));
  } else {
    STRATA_RETURN_IF_ERROR(q_proj.Forward(ctx, x, q));
    STRATA_RETURN_IF_ERROR(k_proj.Forward(ctx, x, k));
  }
  STRATA_RETURN_IF_ERROR(v_proj.Forward(ctx, x, v));
  STRATA_RETURN_IF_ERROR(nn::Rope(ctx.stream, q.f32(), n, c_.num_attention_heads, d,
                                  info_->rope_cos, info_->rope_sin, info_->positions,
                                  info_->max_pos, false));
  STRATA_RETURN_IF_ERROR(nn::Rope(ctx.stream, k.f32(), n, c_.num_key_value_heads, d,
                                  info_->rope_cos, info_->rope_sin, info_->positions,
                                  info_->max_pos, false));
  STRATA_RETURN_IF_ERROR(nn::AttentionForward(ctx.stream, Args()));
  return o_proj.Forward(ctx, F32(acts_->attn, n, h), y);
}

Status LlamaAttention::DoBackward(const nn::RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  const int64_t n = info_->tokens(), d = c_.head_dim(), h = c_.num_attention_heads * d;
  const int64_t kv = c_.num_key_value_heads * d;
  const Tensor d_attn = F32(grads_->d_attn, n, h);
  STRATA_RETURN_IF_ERROR(o_proj.Backward(ctx, dy, d_attn));
  nn::AttentionArgs a = Args();
  a.dout = d_attn.f32();
  a.dq = grads_->dq.f32();
  a.dk = grads_->dk.f32();
  a.dv = grads_->dv.f32();
  a.scratch = grads_->scratch.f32();
  STRATA_RETURN_IF_ERROR(nn::AttentionBackward(ctx.stream, a));
  STRATA_RETURN_IF_ERROR(nn::Rope(ctx.stream, a.dq, n, c_.num_attention_heads, d, info_->rope_cos,
                                  info_->rope_sin, info_->positions, info_->max_pos, true));
  STRATA_RETURN_IF_ERROR(nn::Rope(ctx.stream, a.dk, n, c_.num_key_value_heads, d, info_->rope_cos,
                                  info_->rope_sin, info_->positions, info_->max_pos, true));
  if (q_norm != nullptr) {
    // Through q_norm / k_norm; d_attn (free once the attention backward has read it) holds the
    // gradient of the projection outputs, q's then k's.
    const Tensor dq_raw = F32(grads_->d_attn, n, h), dk_raw = F32(grads_->d_attn, n, kv);
    STRATA_RETURN_IF_ERROR(q_norm->Backward(ctx, F32(grads_->dq, n, h), dq_raw));
    STRATA_RETURN_IF_ERROR(q_proj.Backward(ctx, dq_raw, dx));
    STRATA_RETURN_IF_ERROR(k_norm->Backward(ctx, F32(grads_->dk, n, kv), dk_raw));
    STRATA_RETURN_IF_ERROR(k_proj.Backward(ctx, dk_raw, dx));
  } else {
    STRATA_RETURN_IF_ERROR(q_proj.Backward(ctx, F32(grads_->dq, n, h), dx));
    STRATA_RETURN_IF_ERROR(k_proj.Backward(ctx, F32(grads_->dk, n, kv), dx));
  }
  return v_proj.Backward(ctx, F32(grads_->dv, n, kv), dx);
}

// --- LlamaMLP ------------------------------------------------------------------------------------

LlamaMLP::LlamaMLP(const LlamaConfig& c, DType dtype)
    : UnaryModule("mlp"),
      gate_proj("gate_proj", c.hidden_size, c.intermediate_size, dtype),
      up_proj("up_proj", c.hidden_size, c.intermediate_size, dtype),
      down_proj("down_proj", c.intermediate_size, c.hidden_size, dtype),
      c_(c) {
  RegisterModule(&gate_proj);
  RegisterModule(&up_proj);
  RegisterModule(&down_proj);
  up_proj.set_accumulate_input_grad(true);
}

Status LlamaMLP::DoForward(const nn::RunContext& ctx, const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel() / c_.hidden_size, i = c_.intermediate_size;
  const Tensor gate = F32(acts_->gate, n, i), up = F32(acts_->up, n, i);
  const Tensor act = F32(acts_->act, n, i);
  STRATA_RETURN_IF_ERROR(gate_proj.Forward(ctx, x, gate));
  STRATA_RETURN_IF_ERROR(up_proj.Forward(ctx, x, up));
  STRATA_RETURN_IF_ERROR(nn::SwiGluForward(ctx.stream, gate.f32(), up.f32(), n * i, act.f32()));
  return down_proj.Forward(ctx, act, y);
}

Status LlamaMLP::DoBackward(const nn::RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  const int64_t n = dy.numel() / c_.hidden_size, i = c_.intermediate_size;
  const Tensor gate = F32(acts_->gate, n, i), up = F32(acts_->up, n, i);
  const Tensor d_act = F32(grads_->d_act, n, i);
  STRATA_RETURN_IF_ERROR(down_proj.Backward(ctx, dy, d_act));
  // In place: gate and up become their gradients.
  STRATA_RETURN_IF_ERROR(nn::SwiGluBackward(ctx.stream, gate.f32(), up.f32(), d_act.f32(), n * i,
                                            gate.f32(), up.f32()));
  STRATA_RETURN_IF_ERROR(gate_proj.Backward(ctx, gate, dx));
  return up_proj.Backward(ctx, up, dx);
}

// --- LlamaDecoderLayer ---------------------------------------------------------------------------

LlamaDecoderLayer::LlamaDecoderLayer(int64_t index, const LlamaConfig& c, DType dtype,
                                     const LlamaBatchInfo* info)
    : UnaryModule(std::to_string(index)),
      self_attn(c, dtype, info),
      mlp(c, dtype),
      input_layernorm("input_layernorm", c.hidden_size, c.rms_norm_eps, dtype),
      post_attention_layernorm("post_attention_layernorm", c.hidden_size, c.rms_norm_eps, dtype),
      c_(c),
      info_(info) {
  RegisterModule(&self_attn);
  RegisterModule(&mlp);
  RegisterModule(&input_layernorm);
  RegisterModule(&post_attention_layernorm);
}

void LlamaDecoderLayer::set_workspace(LayerActivations* a, LayerGrads* g, bool recompute) {
  acts_ = a;
  grads_ = g;
  recompute_ = recompute;
  self_attn.set_workspace(a, g);
  mlp.set_workspace(a, g);
}

Status LlamaDecoderLayer::Body(const nn::RunContext& ctx, const Tensor& x, const Tensor& y) {
  const int64_t n = info_->tokens(), h = c_.hidden_size;
  const Tensor norm1 = F32(acts_->norm1, n, h), h1 = F32(acts_->h1, n, h);
  const Tensor norm2 = F32(acts_->norm2, n, h);
  STRATA_RETURN_IF_ERROR(input_layernorm.Forward(ctx, x, norm1));
  STRATA_RETURN_IF_ERROR(self_attn.Forward(ctx, norm1, h1));
  STRATA_RETURN_IF_ERROR(Add(ctx.stream, h1, x, h1));  // h1 = x + attn
  STRATA_RETURN_IF_ERROR(post_attention_layernorm.Forward(ctx, h1, norm2));
  STRATA_RETURN_IF_ERROR(mlp.Forward(ctx, norm2, y));
  return Add(ctx.stream, y, h1, y);  // y = h1 + mlp
}

Status LlamaDecoderLayer::DoForward(const nn::RunContext& ctx, const Tensor& x, const Tensor& y) {
  if (acts_ == nullptr) return FailedPreconditionError(name() + ": no workspace");
  x_ = x;
  return Body(ctx, x, y);
}

Status LlamaDecoderLayer::DoBackward(const nn::RunContext& ctx, const Tensor& dy,
                                     const Tensor& dx) {
  if (x_.empty()) return FailedPreconditionError(name() + ": backward without a forward");
  const int64_t n = info_->tokens(), h = c_.hidden_size;
  if (recompute_) {
    STRATA_RETURN_IF_ERROR(Body(ctx, x_, F32(grads_->y_scratch, n, h)));
  }
  const Tensor d_norm = F32(grads_->d_norm, n, h), d_tmp = F32(grads_->d_tmp, n, h);
  const Tensor d_h1 = F32(grads_->d_h1, n, h);
  STRATA_RETURN_IF_ERROR(mlp.Backward(ctx, dy, d_norm));
  STRATA_RETURN_IF_ERROR(post_attention_layernorm.Backward(ctx, d_norm, d_tmp));
  STRATA_RETURN_IF_ERROR(Add(ctx.stream, dy, d_tmp, d_h1));
  STRATA_RETURN_IF_ERROR(self_attn.Backward(ctx, d_h1, d_norm));
  STRATA_RETURN_IF_ERROR(input_layernorm.Backward(ctx, d_norm, d_tmp));
  return Add(ctx.stream, d_h1, d_tmp, dx);
}

// --- LlamaModel ----------------------------------------------------------------------------------

LlamaModel::LlamaModel(const LlamaConfig& c, DType dtype, const LlamaBatchInfo* info)
    : Module("model"),
      embed_tokens("embed_tokens", c.vocab_size, c.hidden_size, dtype),
      layers("layers"),
      norm("norm", c.hidden_size, c.rms_norm_eps, dtype) {
  RegisterModule(&embed_tokens);
  RegisterModule(&layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layer.push_back(std::make_unique<LlamaDecoderLayer>(i, c, dtype, info));
    layers.Append(layer.back().get());
  }
  RegisterModule(&norm);
}

}  // namespace strata::llama
