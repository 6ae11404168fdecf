#include "tools/strata/generate/estimate_inference.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "core/units.h"
#include "engine/config/config.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_decode.h"
#include "nn/modules/layers/module.h"

namespace strata::cli {
namespace {

constexpr const char* kInferenceUsage =
    "strata estimate --inference (--preset NAME | --model HF_DIR) [--batch N] [--max-len N]\n"
    "                [--dtype fp32|fp16|bf16] [--config CFG] [--gpu-mem B] [--json]\n"
    "  Generation's bytes per tier (device: weights or the gathered ones + KV cache + workspace;\n"
    "  pinned CPU; NVMe) for offload_param none / cpu / nvme, and each forward's traffic.";

int InferenceFail(int code, const std::string& what) {
  std::fprintf(stderr, "strata estimate: %s\n", what.c_str());
  return code;
}

struct Row {
  std::string offload;
  uint64_t device = 0, pinned = 0, nvme = 0, h2d_per_forward = 0, nvme_read_per_forward = 0;
  bool fits = false;
};

}  // namespace

int RunInferenceEstimate(const std::vector<std::string>& raw) {
  std::vector<std::string> args;
  for (const std::string& a : raw) {
    if (a != "--inference") args.push_back(a);
  }
  std::string preset, model, dtype = "bf16", config_path;
  int64_t batch = 1, max_len = 0;
  uint64_t gpu_mem = StrataConfig{}.device_memory_bytes;
  bool json = false;
  FlagParser flags(kInferenceUsage);
  flags.String("preset", &preset, "a Llama preset: tiny, small, 1b, 7b");
  flags.String("model", &model, "a Hugging Face Llama directory (reads config.json)");
  flags.Int("batch", &batch, "sequences generated together", 1);
  flags.Int("max-len", &max_len, "prompt + new tokens per sequence (default: the model's max)", 1);
  flags.Choice("dtype", &dtype, {"fp32", "fp16", "bf16"}, "weights' dtype (without --config)");
  flags.String("config", &config_path, "a DeepSpeed config: its stage-3 and offload_param keys");
  flags.Bytes("gpu-mem", &gpu_mem, "device memory (default: the host-emulated device's)");
  flags.Bool("json", &json, "print one JSON object");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return InferenceFail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (preset.empty() == model.empty())
    return InferenceFail(2, "give one of --preset NAME or --model DIR");
  Result<llama::LlamaConfig> mc =
      preset.empty() ? llama::ReadLlamaConfig(model) : llama::LlamaPreset(preset);
  if (!mc.ok()) return InferenceFail(2, mc.status().message());
  if (max_len == 0) max_len = mc->max_position_embeddings;
  if (Status s = llama::CheckSequenceLength(*mc, max_len, "--max-len " + std::to_string(max_len));
      !s.ok()) {
    return InferenceFail(2, s.message());
  }
  RunContext run;
  run.micro_batch_per_gpu = 1;
  run.gradient_accumulation_steps = 1;
  Result<Config> cfg =
      config_path.empty() ? LoadConfigText("{}", "(defaults)", run) : LoadConfig(config_path, run);
  if (!cfg.ok()) return InferenceFail(2, cfg.status().message());
  const uint64_t cb = config_path.empty()                        ? (dtype == "fp32" ? 4 : 2)
                      : (cfg->bf16.enabled || cfg->fp16.enabled) ? 2
                                                                 : 4;
  // The parameters' element counts as the model lays them out.
  const int64_t h = mc->hidden_size, kv = mc->num_key_value_heads * mc->head_dim();
  const int64_t i = mc->intermediate_size, v = mc->vocab_size;
  std::vector<uint64_t> numels = {static_cast<uint64_t>(v * h)};
  for (int64_t l = 0; l < mc->num_hidden_layers; ++l) {
    for (int64_t n : {h * h, kv * h, kv * h, h * h, i * h, i * h, h * i, h, h}) {
      numels.push_back(static_cast<uint64_t>(n));
    }
  }
  numels.push_back(static_cast<uint64_t>(h));
  if (!mc->tie_word_embeddings) numels.push_back(static_cast<uint64_t>(v * h));
  const ZeroConfig& z = cfg->zero;
  uint64_t total = 0, persistent = 0, largest = 0;
  for (uint64_t n : numels) {
    total += n;
    largest = std::max(largest, n);
    if (static_cast<int64_t>(n) <= z.param_persistence_threshold) persistent += n;
  }
  const uint64_t streamed = total - persistent;
  const uint64_t live = std::min<uint64_t>(
      streamed, std::max<uint64_t>(largest, static_cast<uint64_t>(z.max_live_parameters)) +
                    largest);  // the bound and one module past it
  const infer::KvCachePlan kv_plan = llama::PlanLlamaKvCache(*mc, batch, max_len);
  std::vector<Row> rows;
  for (const char* off : {"none", "cpu", "nvme"}) {
    Row r;
    r.offload = off;
    const std::string o = off;
    r.device = kv_plan.total_bytes() + (o == "none" ? total * cb : (persistent + live) * cb);
    if (o == "cpu") r.pinned = streamed * cb;
    if (o == "nvme") {
      const uint64_t in_cpu =
          std::min<uint64_t>(streamed, static_cast<uint64_t>(z.offload_param.max_in_cpu));
      r.pinned = in_cpu * cb + static_cast<uint64_t>(z.offload_param.buffer_count) *
                                   static_cast<uint64_t>(z.offload_param.buffer_size) * cb;
      r.nvme = streamed * cb;
      r.nvme_read_per_forward = (streamed - in_cpu) * cb;
    }
    if (o != "none") r.h2d_per_forward = streamed * cb;
    r.fits = r.device <= gpu_mem;
    rows.push_back(r);
  }
  if (json) {
    nlohmann::ordered_json j;
    j["model"] = preset.empty() ? model : preset;
    j["params"] = total;
    j["weight_bytes"] = total * cb;
    j["kv_cache_bytes"] = kv_plan.cache_bytes;
    j["workspace_bytes"] = kv_plan.workspace_bytes;
    j["batch"] = batch;
    j["max_len"] = max_len;
    j["kv_cache_rows"] = kv_plan.cache_rows;  // < max_len: a sliding window's rolling cache
    j["gpu_mem"] = gpu_mem;
    for (const Row& r : rows) {
      j["placements"].push_back({{"offload_param", r.offload},
                                 {"device_bytes", r.device},
                                 {"pinned_cpu_bytes", r.pinned},
                                 {"nvme_bytes", r.nvme},
                                 {"h2d_bytes_per_forward", r.h2d_per_forward},
                                 {"nvme_read_bytes_per_forward", r.nvme_read_per_forward},
                                 {"fits_device", r.fits}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s, %.3f B params, weights %s; generation: %lld sequences x %lld positions\n",
              (preset.empty() ? model : preset).c_str(), static_cast<double>(total) / 1e9,
              FormatBytes(total * cb).c_str(), static_cast<long long>(batch),
              static_cast<long long>(max_len));
  std::printf(
      "KV cache %s (%lld positions per sequence%s) + workspace %s on the device (gpu %s)\n\n",
      FormatBytes(kv_plan.cache_bytes).c_str(), static_cast<long long>(kv_plan.cache_rows),
      kv_plan.cache_rows < max_len ? ", rolling: sliding window" : "",
      FormatBytes(kv_plan.workspace_bytes).c_str(), FormatBytes(gpu_mem).c_str());
  std::printf("%-8s %-11s %-11s %-11s %-5s per forward (h2d / nvme read)\n", "offload", "device",
              "pinned cpu", "nvme", "fits");
  for (const Row& r : rows) {
    std::printf(
        "%-8s %-11s %-11s %-11s %-5s %s / %s\n", r.offload.c_str(), FormatBytes(r.device).c_str(),
        FormatBytes(r.pinned).c_str(), FormatBytes(r.nvme).c_str(), r.fits ? "yes" : "no",
        FormatBytes(r.h2d_per_forward).c_str(), FormatBytes(r.nvme_read_per_forward).c_str());
  }
  std::printf(
      "\ncpu/nvme: ZeRO-Inference (zero_optimization.stage 3); the device holds the persistent\n"
      "parameters and at most stage3_max_live_parameters gathered (+ one module) at a time.\n");
  return 0;
}

}  // namespace strata::cli
