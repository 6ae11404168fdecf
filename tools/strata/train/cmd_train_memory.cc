#include "tools/strata/train/cmd_train_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/units.h"

namespace strata::cli {

namespace {

// As the device arena rounds (DeviceArena::kAlignment).
uint64_t Dev(uint64_t bytes) { return (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256; }
uint64_t Pinned(uint64_t bytes) {
  const uint64_t a = bytes >= (uint64_t{2} << 20) ? (uint64_t{2} << 20) : 4096;
  return (bytes + a - 1) / a * a;
}

uint64_t ProcStatusBytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;  // "kB"
  }
  return 0;
}

// One micro-batch's buffers (llama_model.cc EnsureBuffers, llama_layers.cc AllocateActivations /
// AllocateGrads, one RmsNorm rstd per norm), in bytes as allocated.
ActivationBytes LlamaActivations(const llama::LlamaConfig& c, uint64_t b, uint64_t s,
                                 bool checkpointing, bool cpu_checkpointing) {
  const uint64_t n = b * s, h = static_cast<uint64_t>(c.hidden_size), f = 4;
  const uint64_t kv = static_cast<uint64_t>(c.num_key_value_heads * c.head_dim());
  const uint64_t in = static_cast<uint64_t>(c.intermediate_size);
  const uint64_t v = static_cast<uint64_t>(c.vocab_size);
  const uint64_t heads = static_cast<uint64_t>(c.num_attention_heads);
  const uint64_t layers = static_cast<uint64_t>(c.num_hidden_layers);
  const bool cpu_ckpt = checkpointing && cpu_checkpointing;
  const uint64_t layer_acts =
      5 * Dev(n * h * f) + 2 * Dev(n * kv * f) + Dev(b * heads * s * s * f) + 3 * Dev(n * in * f);
  const uint64_t grads =
      6 * Dev(n * h * f) + Dev(n * in * f) + 2 * Dev(n * kv * f) + Dev(s * s * f);
  ActivationBytes a;
  a.device_bytes += 3 * Dev(n * 4);                                // ids, labels, positions
  a.device_bytes += (cpu_ckpt ? 2 : layers + 1) * Dev(n * h * f);  // hidden states
  a.device_bytes += (checkpointing ? 1 : layers) * layer_acts;
  a.device_bytes += grads;
  a.device_bytes +=
      Dev(n * h * f) + Dev(n * v * f) + Dev(n * f) + Dev(f);  // norm, logits, lse, loss
  a.device_bytes += 3 * Dev(n * h * f);                       // d_final_norm, d_hidden x 2
  a.device_bytes += (2 * layers + 1) * Dev(n * f);            // RmsNorm rstd
  if (cpu_ckpt && layers > 0) a.pinned_bytes = Pinned(n * h * f) * layers;
  a.host_bytes = 5 * n * 4;  // the model's ids / positions / labels, the loop's ids / labels
  return a;
}

}  // namespace

ModelShape LlamaModelShape(const llama::LlamaConfig& c, int64_t micro_batch, int64_t seq_len,
                           bool cpu_checkpointing, std::string name) {
  ModelShape m;
  m.name = std::move(name);
  const uint64_t h = static_cast<uint64_t>(c.hidden_size);
  const uint64_t kv = static_cast<uint64_t>(c.num_key_value_heads * c.head_dim());
  const uint64_t in = static_cast<uint64_t>(c.intermediate_size);
  const uint64_t v = static_cast<uint64_t>(c.vocab_size);
  const uint64_t q = static_cast<uint64_t>(c.num_attention_heads * c.head_dim());
  m.param_numels.push_back(v * h);  // embed_tokens
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // self_attn q, k, v, o; mlp gate, up, down; input_layernorm, post_attention_layernorm.
    for (uint64_t n : {q * h, kv * h, kv * h, h * q, in * h, in * h, h * in, h, h}) {
      m.param_numels.push_back(n);
    }
  }
  m.param_numels.push_back(h);                                  // model.norm
  if (!c.tie_word_embeddings) m.param_numels.push_back(v * h);  // lm_head
  m.fixed_device_bytes =
      2 * Dev(static_cast<uint64_t>(c.max_position_embeddings * (c.head_dim() / 2)) * 4);
  const uint64_t b = static_cast<uint64_t>(std::max<int64_t>(micro_batch, 1));
  const uint64_t s = static_cast<uint64_t>(std::max<int64_t>(seq_len, 1));
  m.activations = LlamaActivations(c, b, s, false, false);
  m.activations_checkpointed = LlamaActivations(c, b, s, true, cpu_checkpointing);
  m.activation_note = "micro batch " + std::to_string(b) + " x seq " + std::to_string(s);
  return m;
}

MemoryBaseline MemoryBaseline::Take() {
  // "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  return MemoryBaseline{CurrentRssBytes()};
}

uint64_t CurrentRssBytes() { return ProcStatusBytes("VmRSS"); }
uint64_t PeakRssBytes() { return ProcStatusBytes("VmHWM"); }

TierBytes MeasuredPeaks(const Device& device, const TierBudget& budget,
                        const MemoryBaseline& baseline) {
  TierBytes t{};
  t[static_cast<size_t>(PlanTier::kDevice)] = device.MemoryStats().peak_bytes;
  t[static_cast<size_t>(PlanTier::kPinnedCpu)] = budget.Stats(Tier::kCpu).peak_bytes;
  t[static_cast<size_t>(PlanTier::kNvme)] = budget.Stats(Tier::kNvme).peak_bytes;
  const uint64_t rss = PeakRssBytes();
  uint64_t other = t[static_cast<size_t>(PlanTier::kPinnedCpu)];
  if (device.kind() == DeviceKind::kHost) other += t[static_cast<size_t>(PlanTier::kDevice)];
  const uint64_t growth = rss > baseline.rss_bytes ? rss - baseline.rss_bytes : 0;
  t[static_cast<size_t>(PlanTier::kPageableCpu)] = growth > other ? growth - other : 0;
  return t;
}

TierBytes RunCapacities(const Device& device, const TierBudget& budget) {
  TierBytes t{};
  t[static_cast<size_t>(PlanTier::kDevice)] = device.MemoryStats().capacity_bytes;
  const uint64_t cpu = budget.Stats(Tier::kCpu).limit_bytes;
  t[static_cast<size_t>(PlanTier::kPinnedCpu)] = cpu == TierBudget::kUnlimited ? 0 : cpu;
  return t;
}

Result<MemoryPlan> PlanTrainRun(const llama::LlamaConfig& model, const Config& config, int world,
                                int rank, int64_t seq_len, bool activation_checkpointing) {
  const ModelShape shape =
      LlamaModelShape(model, config.batch.micro_batch_per_gpu, seq_len, false, "llama");
  PlanOptions po;
  po.world = world;
  po.rank = rank;
  po.activation_checkpointing = activation_checkpointing;
  return PlanEngineMemory(shape, config, po);
}

Status CheckTrainRunFits(const MemoryPlan& plan, const Device& device, const TierBudget& budget) {
  Status s = CheckPlanFits(plan, RunCapacities(device, budget));
  if (s.ok()) return s;
  const std::string& m = s.message();
  const size_t nl = m.find('\n');
  if (nl == std::string::npos) return s;
  std::fprintf(stderr, "%s", m.substr(nl + 1).c_str());
  return OutOfMemoryError(m.substr(0, nl) + "; the per-tier table is above");
}

std::string TrainMemoryStartText(const MemoryPlan& plan, const TierBytes& capacities) {
  return "memory plan (" + plan.placement + "), per rank:\n" +
         FormatTierTable(plan, std::nullopt, capacities);
}

std::string TrainMemoryEndText(const MemoryPlan& plan, const TierBytes& peaks) {
  return "memory (planned vs peak; pageable cpu = RSS growth minus device and pinned):\n" +
         FormatTierTable(plan, peaks, std::nullopt);
}

void AddMemoryJson(const MemoryPlan& plan, const TierBytes& peaks, nlohmann::json* j) {
  nlohmann::json planned = nlohmann::json::object(), peak = nlohmann::json::object();
  for (PlanTier t : kAllPlanTiers) {
    const std::string key(PlanTierKey(t));
    planned[key] = plan.bytes(t);
    peak[key] = peaks[static_cast<size_t>(t)];
  }
  peak["cpu"] = peaks[static_cast<size_t>(PlanTier::kPinnedCpu)];
  (*j)["planned_bytes"] = planned;
  (*j)["peak_bytes"] = peak;
}

}  // namespace strata::cli
