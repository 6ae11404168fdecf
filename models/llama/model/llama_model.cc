#include "models/llama/model/llama_model.h"

#include "nn/modules/lm/packed_layout.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "models/llama/model/llama_layers.h"
#include "nn/modules/lm/lm_head_loss.h"
#include "nn/ops/ops.h"
#include "nn/tensor/device_buffer.h"
#include "nn/tensor/parameter_storage.h"
#include "nn/tensor/pinned_stash.h"
#include "offload/device/api/kernels.h"

namespace strata::llama {

using nn::Shape;
using nn::Tensor;

struct LlamaForCausalLM::Impl {
  LlamaBatchInfo info;
  std::unique_ptr<nn::Linear> lm_head;
  std::unique_ptr<nn::LmHeadLoss> head_loss;  // the head + loss, in chunks of tokens
  std::unique_ptr<nn::ParameterStorage> storage;
  nn::DeviceBuffer rope_cos, rope_sin;  // [max_position_embeddings, head_dim / 2]
  // Dynamic RoPE past max_position_embeddings: the tables of the last such length (dyn_len).
  nn::DeviceBuffer dyn_cos, dyn_sin;
  std::vector<float> host_dyn_cos, host_dyn_sin;
  int64_t dyn_len = 0;
  // Batch-shaped buffers, sized for (cap_tokens, cap_seq) and reused.
  int64_t cap_batch = 0, cap_seq = 0;
  nn::DeviceBuffer ids, labels, positions, row_start;
  std::vector<int32_t> host_ids, host_labels, host_pos, host_row_start;
  std::vector<nn::DeviceBuffer> hidden;  // L + 1, or 2 (ping-pong) with cpu checkpointing
  std::vector<LayerActivations> acts;    // L, or 1 shared under activation checkpointing
  LayerGrads grads;
  nn::DeviceBuffer normf, loss, d_normf, d_hidden[2];
  std::unique_ptr<nn::PinnedStash> stash;
  int64_t num_valid = 0;
  bool has_labels = false;
  bool forward_done = false;
};

namespace {

// Appends the parts: GCC 12 at -O3 reports a false -Wrestrict overlap for
// "literal" + std::string&& (as core/units.cc notes), which -Werror Release builds turn fatal.
std::string Join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

Status CheckConfig(const LlamaConfig& c, const LlamaModelOptions& o) {
  auto bad = [](const std::string& field, const std::string& why) {
    return InvalidArgumentError("LlamaForCausalLM: config field " + field + " " + why);
  };
  if (c.vocab_size <= 0) return bad("vocab_size", "must be > 0");
  if (c.hidden_size <= 0) return bad("hidden_size", "must be > 0");
  if (c.intermediate_size <= 0) return bad("intermediate_size", "must be > 0");
  if (c.num_hidden_layers < 0) return bad("num_hidden_layers", "must be >= 0");
  if (c.num_attention_heads <= 0) return bad("num_attention_heads", "must be > 0");
  if (c.explicit_head_dim < 0) return bad("head_dim", "must be > 0");
  if (c.explicit_head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    return bad("hidden_size", Join({"(", std::to_string(c.hidden_size),
                                    ") must be a multiple of num_attention_heads (",
                                    std::to_string(c.num_attention_heads), ")"}));
  }
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad("num_key_value_heads", Join({"(", std::to_string(c.num_key_value_heads),
                                            ") must divide num_attention_heads (",
                                            std::to_string(c.num_attention_heads), ")"}));
  }
  if (c.head_dim() % 2 != 0) {
    return bad("hidden_size",
               Join({"/ num_attention_heads (head_dim ", std::to_string(c.head_dim()),
                     ") must be even for rotary embeddings"}));
  }
  if (c.max_position_embeddings <= 0) return bad("max_position_embeddings", "must be > 0");
  if (!(c.rms_norm_eps > 0)) return bad("rms_norm_eps", "must be > 0");
  if (!(c.rope_theta > 0)) return bad("rope_theta", "must be > 0");
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeType::kDefault && !(r.factor >= 1.0)) {
    return bad("rope_scaling.factor", Join({"(", std::to_string(r.factor), ") must be >= 1"}));
  }
  if (r.type == RopeType::kDynamic && c.head_dim() <= 2) {
    return bad("rope_scaling.rope_type", "\"dynamic\" needs head_dim > 2");
  }
  if (r.type == RopeType::kLlama3 &&
      (r.original_max_position_embeddings <= 0 || !(r.low_freq_factor > 0) ||
       !(r.high_freq_factor > r.low_freq_factor))) {
    return bad("rope_scaling",
               "of type \"llama3\" needs original_max_position_embeddings > 0 and "
               "0 < low_freq_factor < high_freq_factor");
  }
  if (c.sliding_window < 0 || (c.sliding_window > 0 && c.family != LlamaFamily::kMistral)) {
    return bad("sliding_window", Join({"(", std::to_string(c.sliding_window),
                                       ") must be 0 (none), or > 0 for MistralForCausalLM"}));
  }
  if (o.lm_head_chunk_tokens < 0 && o.lm_head_chunk_tokens != nn::LmHeadLoss::kAutoChunk) {
    return InvalidArgumentError("LlamaForCausalLM: lm_head_chunk_tokens " +
                                std::to_string(o.lm_head_chunk_tokens) +
                                " must be >= 0 (0: all tokens at once) or kAutoChunk");
  }
  if (o.cpu_checkpointing && !o.activation_checkpointing) {
    return InvalidArgumentError(
        "LlamaForCausalLM: cpu_checkpointing needs activation_checkpointing (it moves the "
        "checkpointed layer inputs to pinned CPU memory)");
  }
  return Status::Ok();
}

// SplitMix64 → two uniforms → Box-Muller: a normal stream that is the same on every platform.
class Normal {
 public:
  explicit Normal(uint64_t seed) : s_(seed) {}
  double Next() {
    const double u1 = (static_cast<double>(Bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(Bits() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t Bits() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
};

Tensor F32(const nn::DeviceBuffer& b, Shape s) { return b.AsTensor(DType::kFloat32, s); }

Status ModelAlloc(Device* d, nn::DeviceBuffer* b, size_t bytes, const char* what) {
  if (b->size() >= bytes) return Status::Ok();
  b->Reset();
  STRATA_ASSIGN_OR_RETURN(*b, nn::DeviceBuffer::Allocate(d, bytes, std::string("llama ") + what));
  return Status::Ok();
}

}  // namespace

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& config, Device* device,
                                   const LlamaModelOptions& options)
    : CausalLM(""), config_(config), options_(options), device_(device) {}

LlamaForCausalLM::~LlamaForCausalLM() {
  if (device_ != nullptr) device_->Synchronize().IgnoreError();  // no work may use our buffers
}

Result<std::unique_ptr<LlamaForCausalLM>> LlamaForCausalLM::Create(
    const LlamaConfig& config, Device* device, const LlamaModelOptions& options) {
  STRATA_RETURN_IF_ERROR(CheckConfig(config, options));
  if (device == nullptr) return InvalidArgumentError("LlamaForCausalLM: null device");
  std::unique_ptr<LlamaForCausalLM> m(new LlamaForCausalLM(config, device, options));
  STRATA_RETURN_IF_ERROR(m->Init());
  return m;
}

Status LlamaForCausalLM::Init() {
  impl_ = std::make_unique<Impl>();
  model_ = std::make_unique<LlamaModel>(config_, options_.dtype, &impl_->info);
  RegisterModule(model_.get());
  if (config_.tie_word_embeddings) {
    impl_->lm_head = std::make_unique<nn::Linear>("lm_head", &model_->embed_tokens.weight());
  } else {
    impl_->lm_head = std::make_unique<nn::Linear>("lm_head", config_.hidden_size,
                                                  config_.vocab_size, options_.dtype);
  }
  RegisterModule(impl_->lm_head.get());
  AssignNames();
  impl_->head_loss = std::make_unique<nn::LmHeadLoss>(device_, impl_->lm_head.get(),
                                                      options_.lm_head_chunk_tokens);

  STRATA_ASSIGN_OR_RETURN(Stream stream, device_->CreateStream());
  Status s = [&]() -> Status {
    // RoPE tables (llama_rope.h): the frequencies of rope_scaling, in double, rounded once.
    const int64_t max_pos = config_.max_position_embeddings;
    std::vector<float> cos, sin;
    RopeTables(
        RopeInvFreq(config_.rope_scaling, config_.head_dim(), config_.rope_theta, max_pos, max_pos),
        max_pos, &cos, &sin);
    const size_t bytes = cos.size() * sizeof(float);
    STRATA_ASSIGN_OR_RETURN(impl_->rope_cos,
                            nn::DeviceBuffer::Allocate(device_, bytes, "rope cos"));
    STRATA_ASSIGN_OR_RETURN(impl_->rope_sin,
                            nn::DeviceBuffer::Allocate(device_, bytes, "rope sin"));
    STRATA_RETURN_IF_ERROR(
        stream.CopyAsync(impl_->rope_cos.data(), cos.data(), bytes, CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(
        stream.CopyAsync(impl_->rope_sin.data(), sin.data(), bytes, CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(stream.Synchronize());
    if (options_.allocate_parameters) {
      STRATA_ASSIGN_OR_RETURN(
          impl_->storage,
          nn::ParameterStorage::Create(device_, NamedParameters(), options_.allocate_grads,
                                       options_.grad_dtype, stream));
      nn::RunContext ctx{device_, stream, true};
      STRATA_RETURN_IF_ERROR(InitializeParameters(ctx, options_.seed));
    }
    return Status::Ok();
  }();
  Status d = device_->DestroyStream(stream);
  STRATA_RETURN_IF_ERROR(s);
  return d;
}

Status LlamaForCausalLM::InitializeParameters(const nn::RunContext& ctx, uint64_t seed) {
  std::vector<float> host;
  for (nn::Parameter* p : NamedParameters()) {
    host.resize(static_cast<size_t>(p->numel()));
    if (p->name().ends_with(".bias")) {
      std::fill(host.begin(), host.end(), 0.0f);  // Linear biases (Qwen2's q/k/v), as PyTorch
    } else if (p->shape().ndim() == 1) {
      std::fill(host.begin(), host.end(), 1.0f);  // RMSNorm weights
    } else {
      Normal rng(seed * 0x100000001B3ull + static_cast<uint64_t>(p->index()) + 1);
      for (float& v : host) v = static_cast<float>(rng.Next() * options_.init_std);
    }
    STRATA_RETURN_IF_ERROR(
        nn::UploadParameter(ctx.stream, *p, host.data(), DType::kFloat32, host.size()));
  }
  return Status::Ok();
}

Status LlamaForCausalLM::ZeroGrads(const nn::RunContext& ctx) {
  if (impl_->storage != nullptr) return impl_->storage->ZeroGrads(ctx.stream);
  for (nn::Parameter* p : NamedParameters()) {
    if (p->grad() == nullptr) continue;
    STRATA_RETURN_IF_ERROR(
        LaunchFill(ctx.stream, p->grad(), p->grad_dtype(), 0.0f, static_cast<size_t>(p->numel())));
  }
  return ctx.stream.Synchronize();
}

nn::Linear& LlamaForCausalLM::lm_head() { return *impl_->lm_head; }
const float* LlamaForCausalLM::rope_cos() const { return impl_->rope_cos.f32(); }
const float* LlamaForCausalLM::rope_sin() const { return impl_->rope_sin.f32(); }

Tensor LlamaForCausalLM::Hidden(int64_t layer) const {
  const int64_t n = impl_->info.tokens();
  const size_t i =
      options_.cpu_checkpointing ? static_cast<size_t>(layer % 2) : static_cast<size_t>(layer);
  return F32(impl_->hidden[i], Shape{n, config_.hidden_size});
}

Status LlamaForCausalLM::EnsureBuffers(const nn::RunContext& ctx, int64_t batch, int64_t seq) {
  Impl& m = *impl_;
  m.info.batch = batch;
  m.info.seq = seq;
  if (batch <= m.cap_batch && seq == m.cap_seq) return Status::Ok();
  Device* d = device_;
  const size_t n = static_cast<size_t>(batch * seq), h = static_cast<size_t>(config_.hidden_size);
  const size_t f = sizeof(float);
  const int64_t layers = config_.num_hidden_layers;
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.ids, n * 4, "input ids"));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.labels, n * 4, "labels"));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.positions, n * 4, "position ids"));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.row_start, n * 4, "attention row starts"));
  m.hidden.resize(options_.cpu_checkpointing ? 2 : static_cast<size_t>(layers + 1));
  for (auto& b : m.hidden) STRATA_RETURN_IF_ERROR(ModelAlloc(d, &b, n * h * f, "hidden states"));
  m.acts.resize(options_.activation_checkpointing ? 1 : static_cast<size_t>(layers));
  for (auto& a : m.acts) STRATA_RETURN_IF_ERROR(AllocateActivations(d, config_, m.info, &a));
  STRATA_RETURN_IF_ERROR(AllocateGrads(d, config_, m.info, &m.grads));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.normf, n * h * f, "final norm"));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.loss, f, "loss"));
  STRATA_RETURN_IF_ERROR(ModelAlloc(d, &m.d_normf, n * h * f, "d_final_norm"));
  for (auto& b : m.d_hidden) STRATA_RETURN_IF_ERROR(ModelAlloc(d, &b, n * h * f, "d_hidden"));
  for (int64_t l = 0; l < layers; ++l) {
    LayerActivations* a = &m.acts[options_.activation_checkpointing ? 0 : static_cast<size_t>(l)];
    model_->layer[static_cast<size_t>(l)]->set_workspace(a, &m.grads,
                                                         options_.activation_checkpointing);
  }
  if (options_.cpu_checkpointing && layers > 0) {
    m.stash.reset();
    STRATA_ASSIGN_OR_RETURN(m.stash,
                            nn::PinnedStash::Create(d, n * h * f, static_cast<size_t>(layers)));
  }
  m.info.positions = static_cast<const int32_t*>(m.positions.data());
  m.cap_batch = batch;
  m.cap_seq = seq;
  (void)ctx;
  return Status::Ok();
}

Status LlamaForCausalLM::Forward(const nn::RunContext& ctx, const nn::TokenBatch& batch) {
  const int64_t b = batch.batch, t = batch.seq_len, n = b * t;
  if (b <= 0 || t <= 0) return InvalidArgumentError("LlamaForCausalLM::Forward: empty batch");
  // Dynamic RoPE rescales its frequencies for longer sequences: what it is for.
  const bool dynamic = config_.rope_scaling.type == RopeType::kDynamic;
  if (t > config_.max_position_embeddings && !dynamic) {
    return InvalidArgumentError("LlamaForCausalLM::Forward: seq_len " + std::to_string(t) +
                                " exceeds max_position_embeddings " +
                                std::to_string(config_.max_position_embeddings));
  }
  if (batch.input_ids.size() != static_cast<size_t>(n) ||
      (!batch.labels.empty() && batch.labels.size() != static_cast<size_t>(n))) {
    return InvalidArgumentError(
        "LlamaForCausalLM::Forward: input_ids/labels must hold batch * "
        "seq_len = " +
        std::to_string(n) + " ids");
  }
  // Earlier work may still read the staging vectors or the buffers about to be resized.
  STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());
  STRATA_RETURN_IF_ERROR(EnsureBuffers(ctx, b, t));
  Impl& m = *impl_;
  m.host_ids.assign(batch.input_ids.begin(), batch.input_ids.end());
  STRATA_RETURN_IF_ERROR(nn::PackedLayout(
      batch,
      dynamic ? std::max(t, config_.max_position_embeddings) : config_.max_position_embeddings,
      &m.host_pos, &m.host_row_start));
  const bool packed = !batch.segment_ids.empty();
  m.has_labels = !batch.labels.empty();
  m.num_valid = 0;
  if (m.has_labels) {
    // Shifted on the host: token i is scored against labels[i + 1] within its sequence.
    m.host_labels.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int32_t label = batch.labels[static_cast<size_t>(i)];
      if (label != nn::kIgnoreIndex && (label < 0 || label >= config_.vocab_size)) {
        return InvalidArgumentError("LlamaForCausalLM::Forward: label " + std::to_string(label) +
                                    " at position " + std::to_string(i) + " is outside [0, " +
                                    std::to_string(config_.vocab_size) + ") and is not -100");
      }
      // Packed: an example's first token is not predicted from the example packed before it.
      const bool next_starts_example =
          packed && (i + 1) % t != 0 && m.host_row_start[static_cast<size_t>(i + 1)] == (i + 1) % t;
      const bool scored = (i + 1) % t != 0 && !next_starts_example &&
                          batch.labels[static_cast<size_t>(i + 1)] != nn::kIgnoreIndex;
      m.host_labels[static_cast<size_t>(i)] =
          scored ? batch.labels[static_cast<size_t>(i + 1)] : nn::kIgnoreIndex;
      if (scored) ++m.num_valid;
    }
    STRATA_RETURN_IF_ERROR(ctx.stream.CopyAsync(m.labels.data(), m.host_labels.data(), n * 4,
                                                CopyKind::kHostToDevice));
  }
  // Mistral's sliding window: query i sees keys j with i - j < window (and its example's).
  const int64_t window = config_.sliding_window;
  const bool windowed = window > 0 && t > window;
  for (int64_t i = 0; windowed && i < n; ++i) {
    int32_t& start = m.host_row_start[static_cast<size_t>(i)];
    start = std::max(start, static_cast<int32_t>(std::max<int64_t>(0, i % t - window + 1)));
  }
  m.info.row_start = packed || windowed ? static_cast<const int32_t*>(m.row_start.data()) : nullptr;
  STRATA_RETURN_IF_ERROR(SelectRope(ctx));
  STRATA_RETURN_IF_ERROR(
      ctx.stream.CopyAsync(m.ids.data(), m.host_ids.data(), n * 4, CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      ctx.stream.CopyAsync(m.positions.data(), m.host_pos.data(), n * 4, CopyKind::kHostToDevice));
  if (m.info.row_start != nullptr) {
    STRATA_RETURN_IF_ERROR(ctx.stream.CopyAsync(m.row_start.data(), m.host_row_start.data(), n * 4,
                                                CopyKind::kHostToDevice));
  }
  m.forward_done = false;
  const int64_t h = config_.hidden_size, layers = config_.num_hidden_layers;
  STRATA_RETURN_IF_ERROR(nn::WithForwardHooks(*this, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(nn::WithForwardHooks(*model_, ctx, [&]() -> Status {
      STRATA_RETURN_IF_ERROR(model_->embed_tokens.Forward(
          ctx, static_cast<const int32_t*>(m.ids.data()), n, Hidden(0), m.host_ids));
      for (int64_t l = 0; l < layers; ++l) {
        STRATA_RETURN_IF_ERROR(
            model_->layer[static_cast<size_t>(l)]->Forward(ctx, Hidden(l), Hidden(l + 1)));
        if (m.stash != nullptr) {
          STRATA_RETURN_IF_ERROR(m.stash->Save(ctx.stream, static_cast<size_t>(l), Hidden(l)));
        }
      }
      return model_->norm.Forward(ctx, Hidden(layers), F32(m.normf, Shape{n, h}));
    }));
    return m.head_loss->Forward(
        ctx, F32(m.normf, Shape{n, h}),
        m.has_labels ? static_cast<const int32_t*>(m.labels.data()) : nullptr, m.num_valid,
        m.loss.f32());
  }));
  m.forward_done = true;
  return Status::Ok();
}

Status LlamaForCausalLM::SelectRope(const nn::RunContext& ctx) {
  Impl& m = *impl_;
  const int64_t max_pos = config_.max_position_embeddings;
  // The length of the sequence being computed, as transformers takes it: largest position + 1.
  int64_t len = 0;
  for (int32_t p : m.host_pos) len = std::max<int64_t>(len, int64_t{p} + 1);
  if (config_.rope_scaling.type != RopeType::kDynamic || len <= max_pos) {
    m.info.rope_cos = m.rope_cos.f32();
    m.info.rope_sin = m.rope_sin.f32();
    m.info.max_pos = max_pos;
    return Status::Ok();
  }
  if (len != m.dyn_len) {  // the caller synchronized: the host tables are free to rewrite
    RopeTables(
        RopeInvFreq(config_.rope_scaling, config_.head_dim(), config_.rope_theta, max_pos, len),
        len, &m.host_dyn_cos, &m.host_dyn_sin);
    const size_t bytes = m.host_dyn_cos.size() * sizeof(float);
    m.dyn_len = 0;
    STRATA_RETURN_IF_ERROR(ModelAlloc(device_, &m.dyn_cos, bytes, "dynamic rope cos"));
    STRATA_RETURN_IF_ERROR(ModelAlloc(device_, &m.dyn_sin, bytes, "dynamic rope sin"));
    STRATA_RETURN_IF_ERROR(ctx.stream.CopyAsync(m.dyn_cos.data(), m.host_dyn_cos.data(), bytes,
                                                CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(ctx.stream.CopyAsync(m.dyn_sin.data(), m.host_dyn_sin.data(), bytes,
                                                CopyKind::kHostToDevice));
    m.dyn_len = len;
  }
  m.info.rope_cos = m.dyn_cos.f32();
  m.info.rope_sin = m.dyn_sin.f32();
  m.info.max_pos = len;
  return Status::Ok();
}

Status LlamaForCausalLM::Backward(const nn::RunContext& ctx, float loss_scale) {
  Impl& m = *impl_;
  if (!m.forward_done || !m.has_labels) {
    return FailedPreconditionError(
        "LlamaForCausalLM::Backward: needs a Forward with labels first (and one Backward each)");
  }
  m.forward_done = false;
  const int64_t n = m.info.tokens(), h = config_.hidden_size, layers = config_.num_hidden_layers;
  return nn::WithBackwardHooks(*this, ctx, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(m.head_loss->Backward(ctx, loss_scale, F32(m.d_normf, Shape{n, h})));
    return nn::WithBackwardHooks(*model_, ctx, [&]() -> Status {
      int cur = 0;
      STRATA_RETURN_IF_ERROR(model_->norm.Backward(ctx, F32(m.d_normf, Shape{n, h}),
                                                   F32(m.d_hidden[cur], Shape{n, h})));
      for (int64_t l = layers - 1; l >= 0; --l) {
        if (m.stash != nullptr) {
          STRATA_RETURN_IF_ERROR(m.stash->Restore(ctx.stream, static_cast<size_t>(l), Hidden(l)));
        }
        STRATA_RETURN_IF_ERROR(model_->layer[static_cast<size_t>(l)]->Backward(
            ctx, F32(m.d_hidden[cur], Shape{n, h}), F32(m.d_hidden[1 - cur], Shape{n, h})));
        cur = 1 - cur;
      }
      return model_->embed_tokens.Backward(ctx, F32(m.d_hidden[cur], Shape{n, h}));
    });
  });
}

Tensor LlamaForCausalLM::logits() const {
  Tensor t = impl_->head_loss->logits();  // empty when the head ran in chunks
  if (t.empty()) return t;
  t.shape = Shape{impl_->info.batch, impl_->info.seq, config_.vocab_size};
  return t;
}

const float* LlamaForCausalLM::loss_device() const {
  return impl_->has_labels ? impl_->loss.f32() : nullptr;
}

}  // namespace strata::llama
