#include "models/llama/model/llama_decode.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "models/llama/model/llama_layers.h"
#include "nn/ops/ops.h"
#include "nn/tensor/device_buffer.h"
#include "offload/device/api/kernels.h"

namespace strata::llama {

using nn::Shape;
using nn::Tensor;

struct LlamaDecoder::Buffers {
  nn::DeviceBuffer ids, pos, x, y, last, normf, logits, k_cache, v_cache;
  // Dynamic RoPE past max_position_embeddings: [max_len, head_dim / 2] tables whose rows are
  // rewritten for each forward's length (Note [Dynamic RoPE with a cache]).
  nn::DeviceBuffer dyn_cos, dyn_sin;
  std::vector<float> host_dyn_cos, host_dyn_sin;
  LayerActivations acts;
};

namespace {

constexpr uint64_t kF = sizeof(float);
constexpr uint64_t kAllocBytes = 256;  // Device::Allocate's alignment

// `chunk`: tokens per sequence in one forward; `rows`: cache rows per sequence.
struct Sizes {
  uint64_t n, h, qd, kv, i, v, layers, batch, len;
  Sizes(const LlamaConfig& c, int64_t batch_, int64_t chunk, int64_t rows)
      : n(static_cast<uint64_t>(batch_ * chunk)),
        h(static_cast<uint64_t>(c.hidden_size)),
        qd(static_cast<uint64_t>(c.num_attention_heads * c.head_dim())),
        kv(static_cast<uint64_t>(c.num_key_value_heads * c.head_dim())),
        i(static_cast<uint64_t>(c.intermediate_size)),
        v(static_cast<uint64_t>(c.vocab_size)),
        layers(static_cast<uint64_t>(c.num_hidden_layers)),
        batch(static_cast<uint64_t>(batch_)),
        len(static_cast<uint64_t>(rows)) {}
  uint64_t cache_one() const { return layers * batch * len * kv * kF; }  // K or V
};

// Dynamic RoPE needs its own tables when a sequence may pass max_position_embeddings.
bool DynamicTables(const LlamaConfig& c, int64_t max_len) {
  return c.rope_scaling.type == RopeType::kDynamic && max_len > c.max_position_embeddings;
}
uint64_t DynamicTableBytes(const LlamaConfig& c, int64_t max_len) {
  return static_cast<uint64_t>(max_len * (c.head_dim() / 2)) * kF;  // cos or sin
}

Tensor DecodeF32(const nn::DeviceBuffer& b, int64_t rows, int64_t cols) {
  return b.AsTensor(DType::kFloat32, Shape{rows, cols});
}

Status DecodeAlloc(Device* d, nn::DeviceBuffer* b, uint64_t bytes, const char* what) {
  STRATA_ASSIGN_OR_RETURN(
      *b, nn::DeviceBuffer::Allocate(d, static_cast<size_t>(bytes), std::string("decode ") + what));
  return Status::Ok();
}

Status AddF32(const Stream& s, const Tensor& a, const Tensor& b, const Tensor& dst) {
  return LaunchAdd(s, dst.data, DType::kFloat32, a.data, b.data, DType::kFloat32, 1.0f,
                   static_cast<size_t>(dst.numel()));
}

}  // namespace

infer::KvCachePlan PlanLlamaKvCache(const LlamaConfig& c, int64_t max_batch, int64_t max_len) {
  infer::KvCachePlan p;
  p.max_batch = max_batch;
  p.max_len = max_len;
  p.prefill_chunk = max_len;
  p.cache_rows = max_len;
  if (c.sliding_window > 0 && max_len > c.sliding_window) {  // Note [Rolling cache]
    p.prefill_chunk = c.sliding_window;
    p.cache_rows = std::min(max_len, 2 * c.sliding_window - 1);
  }
  const Sizes z(c, max_batch, p.prefill_chunk, p.cache_rows);
  // Each buffer as the device allocates it: Device::Allocate rounds to 256 bytes (cudaMalloc's
  // granularity; the host arena's too), which the device's peak counts.
  const auto a = [](uint64_t bytes) {
    return (bytes + kAllocBytes - 1) / kAllocBytes * kAllocBytes;
  };
  p.cache_bytes = 2 * a(z.cache_one());
  // ids, positions; hidden ping-pong; norm1, q, attention, h1, norm2; k, v; gate, up, act;
  // the last rows, their norm and logits; every RmsNorm's statistics (n floats each).
  p.workspace_bytes = 2 * a(z.n * 4) + 2 * a(z.n * z.h * kF) + 3 * a(z.n * z.h * kF) +
                      2 * a(z.n * z.qd * kF) + 2 * a(z.n * z.kv * kF) + 3 * a(z.n * z.i * kF) +
                      2 * a(z.batch * z.h * kF) + a(z.batch * z.v * kF) +
                      (2 * z.layers + 1) * a(z.n * kF);
  if (c.qkv_bias) {  // Qwen2: each biased projection keeps a column of n ones (nn::Linear)
    p.workspace_bytes += 3 * z.layers * a(z.n * kF);
  }
  if (c.qk_norm) {  // Qwen3: q and k before their norms; the norms' statistics (a row per head)
    const uint64_t hq = static_cast<uint64_t>(c.num_attention_heads);
    const uint64_t hkv = static_cast<uint64_t>(c.num_key_value_heads);
    p.workspace_bytes +=
        a(z.n * z.qd * kF) + a(z.n * z.kv * kF) + z.layers * (a(z.n * hq * kF) + a(z.n * hkv * kF));
  }
  if (DynamicTables(c, max_len)) p.workspace_bytes += 2 * a(DynamicTableBytes(c, max_len));
  return p;
}

LlamaDecoder::LlamaDecoder(LlamaForCausalLM* model, const infer::KvCachePlan& plan)
    : model_(model), plan_(plan) {}

LlamaDecoder::~LlamaDecoder() { Release(); }

Result<std::unique_ptr<LlamaDecoder>> LlamaDecoder::Create(LlamaForCausalLM* model,
                                                           int64_t max_batch, int64_t max_len) {
  if (model == nullptr) return InvalidArgumentError("LlamaDecoder: null model");
  const LlamaConfig& c = model->config();
  if (max_batch <= 0 || max_len <= 0) {
    return InvalidArgumentError("LlamaDecoder: max_batch (" + std::to_string(max_batch) +
                                ") and max_len (" + std::to_string(max_len) + ") must be > 0");
  }
  STRATA_RETURN_IF_ERROR(CheckSequenceLength(
      c, max_len, "LlamaDecoder: max_len " + std::to_string(max_len) + " (prompt + new tokens)"));
  std::unique_ptr<LlamaDecoder> d(new LlamaDecoder(model, PlanLlamaKvCache(c, max_batch, max_len)));
  STRATA_RETURN_IF_ERROR(d->Allocate());
  return d;
}

Status LlamaDecoder::Allocate() {
  if (buf_ != nullptr) return Status::Ok();
  const LlamaConfig& c = model_->config();
  const Sizes z(c, plan_.max_batch, plan_.prefill_chunk, plan_.cache_rows);
  Device* d = model_->device();
  auto b = std::make_unique<Buffers>();
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->k_cache, z.cache_one(), "KV cache (keys)"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->v_cache, z.cache_one(), "KV cache (values)"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->ids, z.n * 4, "input ids"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->pos, z.n * 4, "positions"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->x, z.n * z.h * kF, "hidden"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->y, z.n * z.h * kF, "hidden"));
  LayerActivations& a = b->acts;
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.norm1, z.n * z.h * kF, "norm1"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.q, z.n * z.qd * kF, "q"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.k, z.n * z.kv * kF, "k"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.v, z.n * z.kv * kF, "v"));
  if (c.qk_norm) {
    STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.q_raw, z.n * z.qd * kF, "q before q_norm"));
    STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.k_raw, z.n * z.kv * kF, "k before k_norm"));
  }
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.attn, z.n * z.qd * kF, "attention output"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.h1, z.n * z.h * kF, "residual"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.norm2, z.n * z.h * kF, "norm2"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.gate, z.n * z.i * kF, "gate"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.up, z.n * z.i * kF, "up"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &a.act, z.n * z.i * kF, "mlp activation"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->last, z.batch * z.h * kF, "last rows"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->normf, z.batch * z.h * kF, "final norm"));
  STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->logits, z.batch * z.v * kF, "logits"));
  if (DynamicTables(c, plan_.max_len)) {
    const uint64_t bytes = DynamicTableBytes(c, plan_.max_len);
    STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->dyn_cos, bytes, "dynamic rope cos"));
    STRATA_RETURN_IF_ERROR(DecodeAlloc(d, &b->dyn_sin, bytes, "dynamic rope sin"));
    b->host_dyn_cos.resize(bytes / kF);
    b->host_dyn_sin.resize(bytes / kF);
  }
  buf_ = std::move(b);
  return Status::Ok();
}

uint64_t LlamaDecoder::allocated_bytes() const {
  if (buf_ == nullptr) return 0;
  const Buffers& b = *buf_;
  const LayerActivations& a = b.acts;
  uint64_t sum = 0;
  for (const nn::DeviceBuffer* x :
       {&b.ids,     &b.pos,   &b.x,   &b.y,     &b.last,  &b.normf,   &b.logits, &b.k_cache,
        &b.v_cache, &a.norm1, &a.q,   &a.k,     &a.v,     &a.attn,    &a.h1,     &a.norm2,
        &a.gate,    &a.up,    &a.act, &a.q_raw, &a.k_raw, &b.dyn_cos, &b.dyn_sin}) {
    sum += x->size();
  }
  return sum;
}

void LlamaDecoder::Release() {
  if (buf_ == nullptr) return;
  model_->device()->Synchronize().IgnoreError();  // no queued work may still use the buffers
  buf_.reset();
  lengths_.clear();
}

Status LlamaDecoder::Prefill(const nn::RunContext& ctx,
                             const std::vector<std::vector<int32_t>>& prompts,
                             std::vector<float>* logits) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  if (batch <= 0 || batch > plan_.max_batch) {
    return InvalidArgumentError("LlamaDecoder::Prefill: " + std::to_string(batch) +
                                " prompts; the cache holds 1.." + std::to_string(plan_.max_batch));
  }
  int64_t seq = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t len = static_cast<int64_t>(prompts[b].size());
    if (len <= 0 || len > plan_.max_len) {
      return InvalidArgumentError("LlamaDecoder::Prefill: prompt " + std::to_string(b) + " has " +
                                  std::to_string(len) + " tokens; max_len allows 1.." +
                                  std::to_string(plan_.max_len));
    }
    seq = std::max(seq, len);
  }
  STRATA_RETURN_IF_ERROR(Allocate());
  lengths_.assign(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    lengths_[static_cast<size_t>(b)] = static_cast<int64_t>(prompts[static_cast<size_t>(b)].size());
  }
  // Positions [c0, c0 + chunk) of every sequence per forward (one chunk unless a sliding window
  // made the cache rolling, Note [Rolling cache]); a sequence's logits come from the chunk that
  // holds its last prompt token.
  std::vector<float> chunk_logits;
  const size_t vocab = static_cast<size_t>(vocab_size());
  logits->assign(static_cast<size_t>(batch) * vocab, 0.0f);
  for (int64_t c0 = 0; c0 < seq; c0 += plan_.prefill_chunk) {
    const int64_t chunk = std::min(plan_.prefill_chunk, seq - c0);
    STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());  // the staging vectors are free
    host_ids_.assign(static_cast<size_t>(batch * chunk), 0);
    host_pos_.resize(host_ids_.size());
    host_write_.resize(static_cast<size_t>(batch));
    std::vector<int64_t> last(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const auto& p = prompts[static_cast<size_t>(b)];
      const int64_t len = static_cast<int64_t>(p.size());
      const int64_t real = std::clamp<int64_t>(len - c0, 0, chunk);  // the rest is padding
      if (real > 0) std::copy_n(p.begin() + c0, real, host_ids_.begin() + b * chunk);
      for (int64_t t = 0; t < chunk; ++t)
        host_pos_[static_cast<size_t>(b * chunk + t)] = static_cast<int32_t>(c0 + t);
      host_write_[static_cast<size_t>(b)] = real;
      last[static_cast<size_t>(b)] = b * chunk + std::max<int64_t>(real - 1, 0);
    }
    STRATA_RETURN_IF_ERROR(Run(ctx, batch, chunk, last, &chunk_logits));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t end = lengths_[static_cast<size_t>(b)];
      if (end > c0 && end <= c0 + chunk) {
        const size_t at = static_cast<size_t>(b) * vocab;
        std::copy_n(chunk_logits.data() + at, vocab, logits->data() + at);
      }
    }
  }
  return Status::Ok();
}

Status LlamaDecoder::Decode(const nn::RunContext& ctx, std::span<const int32_t> tokens,
                            std::vector<float>* logits) {
  const int64_t batch = static_cast<int64_t>(lengths_.size());
  if (batch == 0 || buf_ == nullptr) {
    return FailedPreconditionError("LlamaDecoder::Decode: no sequences (Prefill first)");
  }
  if (static_cast<int64_t>(tokens.size()) != batch) {
    return InvalidArgumentError("LlamaDecoder::Decode: " + std::to_string(tokens.size()) +
                                " tokens for " + std::to_string(batch) + " sequences");
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (lengths_[static_cast<size_t>(b)] >= plan_.max_len) {
      return InvalidArgumentError("LlamaDecoder::Decode: sequence " + std::to_string(b) +
                                  " is full (max_len " + std::to_string(plan_.max_len) + ")");
    }
  }
  STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());
  host_ids_.assign(tokens.begin(), tokens.end());
  host_pos_.resize(static_cast<size_t>(batch));
  host_write_.assign(static_cast<size_t>(batch), 1);
  std::vector<int64_t> last(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    host_pos_[static_cast<size_t>(b)] = static_cast<int32_t>(lengths_[static_cast<size_t>(b)]);
    last[static_cast<size_t>(b)] = b;
  }
  STRATA_RETURN_IF_ERROR(Run(ctx, batch, 1, last, logits));
  for (int64_t& len : lengths_) ++len;
  return Status::Ok();
}

// Note [Dynamic RoPE with a cache]
// transformers' rotary module, under generate with a KV cache, takes each forward's length as
// L = largest position id in the batch + 1 and, for rope_type "dynamic" with L >
// max_position_embeddings, rotates that forward's queries and keys with the frequencies of L
// (llama_rope.h); the keys already cached keep the rotation they were written with. So a prefill
// of prompts padded to T uses L = T, and the decode step that writes position p of the longest
// sequence uses L = p + 1, for every sequence of the batch. The decoder does the same: it fills
// the rows of this forward's positions in [max_len, head_dim / 2] tables with L's frequencies
// (in double, rounded once, as the model's tables) and rotates with them; for L <=
// max_position_embeddings dynamic is the default RoPE and the model's tables serve.
Status LlamaDecoder::SelectDynamicRope(const Stream& s, const float** cos, const float** sin,
                                       int64_t* rows) {
  const LlamaConfig& c = model_->config();
  Buffers& B = *buf_;
  int64_t len = 0;
  for (int32_t p : host_pos_) len = std::max<int64_t>(len, int64_t{p} + 1);
  if (c.rope_scaling.type != RopeType::kDynamic || len <= c.max_position_embeddings) {
    return Status::Ok();
  }
  const std::vector<double> inv =
      RopeInvFreq(c.rope_scaling, c.head_dim(), c.rope_theta, c.max_position_embeddings, len);
  const int64_t half = static_cast<int64_t>(inv.size());
  // This forward's positions: a contiguous range per sequence (the caller synchronized the
  // stream, so the host rows are free to rewrite).
  const int64_t seqs = static_cast<int64_t>(lengths_.size());
  const int64_t per_seq = static_cast<int64_t>(host_pos_.size()) / seqs;
  std::vector<int64_t> done;  // a prefill's rows share their positions; decode rows may too
  for (int64_t b = 0; b < seqs; ++b) {
    const int64_t p0 = host_pos_[static_cast<size_t>(b * per_seq)];
    if (std::find(done.begin(), done.end(), p0) != done.end()) continue;
    done.push_back(p0);
    for (int64_t p = p0; p < p0 + per_seq; ++p) {
      RopeTableRow(inv, p, B.host_dyn_cos.data() + p * half, B.host_dyn_sin.data() + p * half);
    }
    const size_t off = static_cast<size_t>(p0 * half);
    const size_t bytes = static_cast<size_t>(per_seq * half) * kF;
    STRATA_RETURN_IF_ERROR(s.CopyAsync(B.dyn_cos.f32() + off, B.host_dyn_cos.data() + off, bytes,
                                       CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(s.CopyAsync(B.dyn_sin.f32() + off, B.host_dyn_sin.data() + off, bytes,
                                       CopyKind::kHostToDevice));
  }
  *cos = B.dyn_cos.f32();
  *sin = B.dyn_sin.f32();
  *rows = plan_.max_len;
  return Status::Ok();
}

Status LlamaDecoder::Run(const nn::RunContext& ctx, int64_t batch, int64_t seq,
                         const std::vector<int64_t>& last, std::vector<float>* logits) {
  const LlamaConfig& c = model_->config();
  Buffers& B = *buf_;
  const Stream& s = ctx.stream;
  const int64_t n = batch * seq, h = c.hidden_size, d = c.head_dim(), i = c.intermediate_size;
  const int64_t kvd = c.num_key_value_heads * d, len = plan_.cache_rows;
  const size_t n4 = static_cast<size_t>(n) * 4;
  STRATA_RETURN_IF_ERROR(s.CopyAsync(B.ids.data(), host_ids_.data(), n4, CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(s.CopyAsync(B.pos.data(), host_pos_.data(), n4, CopyKind::kHostToDevice));
  const auto* pos = static_cast<const int32_t*>(B.pos.data());
  const float* rope_cos = model_->rope_cos();
  const float* rope_sin = model_->rope_sin();
  int64_t rope_rows = c.max_position_embeddings;
  STRATA_RETURN_IF_ERROR(SelectDynamicRope(s, &rope_cos, &rope_sin, &rope_rows));
  LayerActivations& a = B.acts;
  LlamaModel& m = model_->model();
  const Tensor x = DecodeF32(B.x, n, h), y = DecodeF32(B.y, n, h), norm1 = DecodeF32(a.norm1, n, h);
  const int64_t qd = c.num_attention_heads * d;
  const Tensor q = DecodeF32(a.q, n, qd), k = DecodeF32(a.k, n, kvd), v = DecodeF32(a.v, n, kvd);
  const Tensor attn = DecodeF32(a.attn, n, qd), h1 = DecodeF32(a.h1, n, h),
               norm2 = DecodeF32(a.norm2, n, h);
  (void)i;
  auto layer_body = [&](int64_t l, const Tensor& in, const Tensor& out) -> Status {
    LlamaDecoderLayer& layer = *m.layer[static_cast<size_t>(l)];
    layer.mlp.set_workspace(&a, nullptr);
    STRATA_RETURN_IF_ERROR(layer.input_layernorm.Forward(ctx, in, norm1));
    LlamaAttention& at = layer.self_attn;
    STRATA_RETURN_IF_ERROR(nn::WithForwardHooks(at, ctx, [&]() -> Status {
      if (at.q_norm != nullptr) {  // Qwen3: per-head norms before RoPE
        const Tensor q_raw = DecodeF32(a.q_raw, n, qd), k_raw = DecodeF32(a.k_raw, n, kvd);
        STRATA_RETURN_IF_ERROR(at.q_proj.Forward(ctx, norm1, q_raw));
        STRATA_RETURN_IF_ERROR(at.q_norm->Forward(ctx, q_raw, q));
        STRATA_RETURN_IF_ERROR(at.k_proj.Forward(ctx, norm1, k_raw));
        STRATA_RETURN_IF_ERROR(at.k_norm->Forward(ctx, k_raw, k));
      } else {
        STRATA_RETURN_IF_ERROR(at.q_proj.Forward(ctx, norm1, q));
        STRATA_RETURN_IF_ERROR(at.k_proj.Forward(ctx, norm1, k));
      }
      STRATA_RETURN_IF_ERROR(at.v_proj.Forward(ctx, norm1, v));
      STRATA_RETURN_IF_ERROR(nn::Rope(s, q.f32(), n, c.num_attention_heads, d, rope_cos, rope_sin,
                                      pos, rope_rows, false));
      STRATA_RETURN_IF_ERROR(nn::Rope(s, k.f32(), n, c.num_key_value_heads, d, rope_cos, rope_sin,
                                      pos, rope_rows, false));
      // The new rows into the cache: sequence b's first host_write_[b] rows (the rest is
      // padding, never written) go to its positions p0.., row p % len (a rolling cache wraps:
      // at most two contiguous pieces).
      const int64_t layer_off = l * plan_.max_batch * len * kvd;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t p0 = host_pos_[static_cast<size_t>(b * seq)];
        const int64_t count = host_write_[static_cast<size_t>(b)];
        for (int64_t done = 0; done < count;) {
          const int64_t row = (p0 + done) % len, piece = std::min(count - done, len - row);
          const int64_t dst = layer_off + (b * len + row) * kvd, src = (b * seq + done) * kvd;
          const size_t bytes = static_cast<size_t>(piece * kvd) * kF;
          STRATA_RETURN_IF_ERROR(
              s.CopyAsync(B.k_cache.f32() + dst, k.f32() + src, bytes, CopyKind::kDeviceToDevice));
          STRATA_RETURN_IF_ERROR(
              s.CopyAsync(B.v_cache.f32() + dst, v.f32() + src, bytes, CopyKind::kDeviceToDevice));
          done += piece;
        }
      }
      nn::CachedAttentionArgs ca;
      ca.batch = batch, ca.q_len = seq, ca.cache_len = len;
      ca.heads = c.num_attention_heads, ca.kv_heads = c.num_key_value_heads, ca.head_dim = d;
      // Mistral (Note [Rolling cache]); a window of at least the cache's rows masks nothing.
      ca.window = c.sliding_window > 0 && c.sliding_window < len ? c.sliding_window : 0;
      ca.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
      ca.q = q.f32();
      // Sequence b's cache starts at row b * len of this layer's [max_batch, len] block.
      ca.k_cache = B.k_cache.f32() + layer_off;
      ca.v_cache = B.v_cache.f32() + layer_off;
      ca.pos = pos;
      ca.out = attn.f32();
      STRATA_RETURN_IF_ERROR(nn::CachedAttention(s, ca));
      return at.o_proj.Forward(ctx, attn, h1);
    }));
    STRATA_RETURN_IF_ERROR(AddF32(s, h1, in, h1));  // h1 = in + attn
    STRATA_RETURN_IF_ERROR(layer.post_attention_layernorm.Forward(ctx, h1, norm2));
    STRATA_RETURN_IF_ERROR(layer.mlp.Forward(ctx, norm2, out));
    return AddF32(s, out, h1, out);  // out = h1 + mlp
  };
  const int64_t rows = batch;
  const Tensor last_rows = DecodeF32(B.last, rows, h), normf = DecodeF32(B.normf, rows, h);
  const Tensor out_logits = DecodeF32(B.logits, rows, c.vocab_size);
  STRATA_RETURN_IF_ERROR(nn::WithForwardHooks(*model_, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(nn::WithForwardHooks(m, ctx, [&]() -> Status {
      STRATA_RETURN_IF_ERROR(
          m.embed_tokens.Forward(ctx, static_cast<const int32_t*>(B.ids.data()), n, x, host_ids_));
      Tensor cur = x, next = y;
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        LlamaDecoderLayer& layer = *m.layer[static_cast<size_t>(l)];
        STRATA_RETURN_IF_ERROR(
            nn::WithForwardHooks(layer, ctx, [&]() -> Status { return layer_body(l, cur, next); }));
        std::swap(cur, next);
      }
      for (int64_t b = 0; b < rows; ++b) {
        STRATA_RETURN_IF_ERROR(s.CopyAsync(last_rows.f32() + b * h,
                                           cur.f32() + last[static_cast<size_t>(b)] * h,
                                           static_cast<size_t>(h) * kF, CopyKind::kDeviceToDevice));
      }
      return m.norm.Forward(ctx, last_rows, normf);
    }));
    return model_->lm_head().Forward(ctx, normf, out_logits);
  }));
  if (on_pass_end_) STRATA_RETURN_IF_ERROR(on_pass_end_());
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  STRATA_RETURN_IF_ERROR(
      s.CopyAsync(logits->data(), out_logits.data, logits->size() * kF, CopyKind::kDeviceToHost));
  return s.Synchronize();
}

}  // namespace strata::llama
