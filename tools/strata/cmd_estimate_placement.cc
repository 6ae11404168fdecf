// `strata estimate`'s placements (cmd_estimate_placement.h): the machine (flags, else this one),
// the model's shape and parameter names, and for each ZeRO placement its config, its memory plan
// (NVMe placements sized within the CPU budget) and the tier it does not fit.
#include "tools/strata/cmd_estimate_placement.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "engine/plan/cpu_budget.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/llama_footprint.h"
#include "nn/modules/lm/lm_head_loss.h"

namespace strata::cli::internal {
namespace {

uint64_t MemTotalBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

Machine ProbeMachine(const EstimateCliOptions& o, const FlagParser& flags) {
  Machine m;
  if (flags.WasSet("gpu-mem")) {
    m.gpu = o.gpu_mem, m.gpu_from = "--gpu-mem";
  } else {
    m.gpu = StrataConfig{}.device_memory_bytes;
    m.gpu_from = "the host-emulated device's default (strata.device_memory); no GPU assumed";
  }
  if (flags.WasSet("cpu-mem")) {
    m.cpu = o.cpu_mem, m.cpu_from = "--cpu-mem";
  } else {
    m.cpu = MemTotalBytes(), m.cpu_from = "MemTotal of this machine";
  }
  if (flags.WasSet("nvme")) {
    m.nvme = o.nvme, m.nvme_from = "--nvme";
  } else {
    std::string dir = o.nvme_path;
    if (dir.empty()) {
      char cwd[4096];
      dir = getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : ".";
    }
    struct statvfs vfs {};
    if (statvfs(dir.c_str(), &vfs) == 0) m.nvme = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    m.nvme_from = "free space at " + dir;
  }
  return m;
}

// The model as the planner sees it.
namespace {

// A Llama's parameter names in LlamaFootprint's order.
std::vector<std::string> LlamaParamNames(const llama::LlamaConfig& c) {
  std::vector<std::string> n = {"model.embed_tokens.weight"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                          "input_layernorm", "post_attention_layernorm"}) {
      n.push_back(p + w + ".weight");
    }
  }
  n.push_back("model.norm.weight");
  if (!c.tie_word_embeddings) n.push_back("lm_head.weight");
  return n;
}

}  // namespace

Result<ModelShape> ReadShape(const EstimateCliOptions& o, int64_t* hidden, int64_t* seq_len,
                             std::vector<std::string>* names) {
  if (o.params > 0) {
    const uint64_t n = static_cast<uint64_t>(o.params);
    const uint64_t layer = o.largest_layer > 0 ? static_cast<uint64_t>(o.largest_layer)
                                               : std::max<uint64_t>(1, n / 64);
    std::vector<uint64_t> numels;
    for (uint64_t left = n; left > 0; left -= std::min(left, layer)) {
      numels.push_back(std::min(left, layer));
    }
    *seq_len = o.seq_len > 0 ? o.seq_len : 2048;
    ModelShape s = ShapeFromNumels(std::move(numels), std::to_string(n) + " params");
    s.activation_note = "not counted (--params gives no model shape)";
    return s;
  }
  llama::LlamaConfig c;
  if (!o.preset.empty()) {
    STRATA_ASSIGN_OR_RETURN(c, llama::LlamaPreset(o.preset));
  } else {
    STRATA_ASSIGN_OR_RETURN(c, llama::ReadLlamaConfig(o.model));
  }
  *hidden = c.hidden_size;
  *names = LlamaParamNames(c);
  *seq_len = o.seq_len > 0 ? o.seq_len : std::min<int64_t>(2048, c.max_position_embeddings);
  STRATA_RETURN_IF_ERROR(
      llama::CheckSequenceLength(c, *seq_len, "--seq-len " + std::to_string(*seq_len)));
  int64_t chunk = nn::LmHeadLoss::kAutoChunk;
  if (o.lm_head_chunk != "auto") {
    char* end = nullptr;
    chunk = std::strtoll(o.lm_head_chunk.c_str(), &end, 10);
    if (o.lm_head_chunk.empty() || *end != '\0' || chunk < 0) {
      return InvalidArgumentError("--lm-head-chunk " + o.lm_head_chunk +
                                  ": allowed: auto, 0 (whole logits) or a token count");
    }
  }
  return llama::LlamaFootprint(c, o.micro_batch, *seq_len, false,
                               o.preset.empty() ? o.model : o.preset, chunk);
}

namespace {

// The sizing keys the search chose, as (path, value).
std::vector<std::pair<std::string, int64_t>> ChosenValues(const BudgetPlan& b) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const std::string& line : b.chosen) {
    const size_t eq = line.find(" = ");
    out.emplace_back(line.substr(0, eq), std::stoll(line.substr(eq + 3)));
  }
  return out;
}

}  // namespace

std::string ConfigJson(const EstimateCliOptions& o, int stage, const std::string& offload,
                       const std::string& nvme_path,
                       const std::vector<std::pair<std::string, int64_t>>& chosen,
                       uint64_t cpu_budget) {
  nlohmann::ordered_json j;
  j["train_micro_batch_size_per_gpu"] = o.micro_batch;
  j["gradient_accumulation_steps"] = 1;
  j["gradient_clipping"] = 1.0;
  if (o.dtype == "bf16") j["bf16"] = {{"enabled", true}};
  if (o.dtype == "fp16") j["fp16"] = {{"enabled", true}};
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-4}, {"weight_decay", 0.0}}}};
  nlohmann::ordered_json z;
  z["stage"] = stage;
  if (offload != "none") {
    nlohmann::ordered_json off = {{"device", offload}, {"pin_memory", true}};
    if (offload == "nvme") off["nvme_path"] = nvme_path;
    z["offload_optimizer"] = off;
    if (stage == 3) z["offload_param"] = off;
  }
  j["zero_optimization"] = z;
  // The keys chosen within the CPU budget, under their DeepSpeed paths.
  for (const auto& [path, value] : chosen) {
    nlohmann::ordered_json* at = &j;
    size_t begin = 0;
    for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', begin)) {
      at = &(*at)[path.substr(begin, dot - begin)];
      begin = dot + 1;
    }
    (*at)[path.substr(begin)] = value;
  }
  if (cpu_budget > 0) j["strata"] = {{"cpu_memory", cpu_budget}};
  return j.dump(2);
}

std::string Disallowed(int stage, const std::string& offload) {
  if (stage == 0 && offload != "none") return "offload needs ZeRO stage 1-3";
  return "";
}

namespace {

// Which parameter is the largest and its name ("model.layers.N.mlp.gate_proj.weight" for a
// Llama, else its index).
std::string LargestParameterName(const ModelShape& shape, const std::vector<std::string>& names) {
  size_t at = 0;
  for (size_t i = 0; i < shape.param_numels.size(); ++i) {
    if (shape.param_numels[i] > shape.param_numels[at]) at = i;
  }
  return at < names.size() ? names[at]
                           : "parameter " + std::to_string(at) + " of " +
                                 std::to_string(shape.param_numels.size());
}

std::string DeviceMisfit(const ModelShape& shape, const Config& config, const MemoryPlan& plan,
                         uint64_t gpu, const std::vector<std::string>& names) {
  const PlanItem* big = nullptr;
  for (const PlanItem& it : plan.items) {
    if (it.tier == PlanTier::kDevice && (big == nullptr || it.bytes > big->bytes)) big = &it;
  }
  std::string out = "device needs " + FormatBytes(plan.bytes(PlanTier::kDevice)) + " of " +
                    FormatBytes(gpu) + " (largest: " + (big ? big->what : "-") + ", " +
                    FormatBytes(big ? big->bytes : 0) + ")";
  // The least a device can hold: one layer's parameters gathered in the compute dtype and its
  // fp32 gradients (ZeRO-3 with everything offloaded; DeepSpeed's "largest layer" term).
  const uint64_t cb = config.bf16.enabled || config.fp16.enabled ? 2 : 4;
  const uint64_t layer = shape.LargestParameter() * (cb + 4);
  if (layer > gpu) {
    out += "; the single layer " + LargestParameterName(shape, names) + " (" +
           std::to_string(shape.LargestParameter()) + " params) alone needs " + FormatBytes(layer) +
           " (gathered parameters + fp32 gradients): no placement fits it";
  }
  return out;
}

}  // namespace

Status Evaluate(const ModelShape& shape, const Config& config, const EstimateCliOptions& o,
                const Machine& m, const std::vector<std::string>& free_keys,
                const std::vector<std::string>& names, Candidate* c) {
  PlanOptions po;
  po.world = static_cast<int>(o.world);
  po.activation_checkpointing = o.checkpointing;
  po.include_activations = o.params == 0;
  const uint64_t per_node = static_cast<uint64_t>((o.world + o.nodes - 1) / o.nodes);
  const ZeroConfig& z = config.zero;
  const bool nvme = z.offload_optimizer.device == OffloadDevice::kNvme ||
                    (z.stage == 3 && z.offload_param.device == OffloadDevice::kNvme);
  if (nvme && !free_keys.empty()) {
    // The buffers sized within the CPU budget (engine/plan/cpu_budget.h).
    c->searched = true;
    c->cpu_budget =
        config.strata.cpu_memory_bytes > 0 ? config.strata.cpu_memory_bytes : m.cpu / per_node;
    STRATA_ASSIGN_OR_RETURN(BudgetPlan b,
                            SearchWithinCpuBudget(shape, config, po, c->cpu_budget, free_keys));
    c->plan = std::move(b.plan);
    c->minimum_cpu = b.minimum_cpu_bytes;
    c->chosen = ChosenValues(b);
  } else {
    STRATA_ASSIGN_OR_RETURN(c->plan, PlanEngineMemory(shape, config, po));
  }
  c->cpu_per_node =
      per_node * (c->plan.bytes(PlanTier::kPinnedCpu) + c->plan.bytes(PlanTier::kPageableCpu));
  c->nvme_per_node = per_node * c->plan.bytes(PlanTier::kNvme);
  if (c->plan.bytes(PlanTier::kDevice) > m.gpu) {
    c->misfit = "device";
    c->misfit_detail = DeviceMisfit(shape, config, c->plan, m.gpu, names);
  } else if (c->cpu_per_node > m.cpu) {
    c->misfit = "cpu";
    c->misfit_detail = "cpu needs " + FormatBytes(c->cpu_per_node) + " per node of " +
                       FormatBytes(m.cpu) +
                       (c->searched ? " with the sizing keys at their smallest (the minimum "
                                      "pipeline: " +
                                          FormatBytes(c->minimum_cpu) + " per rank)"
                                    : std::string());
  } else if (c->nvme_per_node > m.nvme) {
    c->misfit = "nvme";
    c->misfit_detail =
        "nvme needs " + FormatBytes(c->nvme_per_node) + " per node of " + FormatBytes(m.nvme);
  }
  return Status::Ok();
}

}  // namespace strata::cli::internal
