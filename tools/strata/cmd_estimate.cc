// `strata estimate`: will a model fit, and with which config? Per-rank bytes on each tier
// (device, pinned CPU, pageable CPU, NVMe) for ZeRO stages 0-3 x offload none/cpu/nvme, from the
// engine's own memory plan (engine/plan/memory_plan.h), checked against the machine (by default
// this one), with each placement's step traffic; --emit-config prints the fitting config with the
// least traffic as a DeepSpeed JSON. docs/estimate.md has the formulas.
// Exit 0 ok, 1 --emit-config found nothing that fits, 2 bad usage or invalid input.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "core/units.h"
#include "engine/config/config.h"
#include "engine/plan/cpu_budget.h"
#include "engine/plan/memory_plan.h"
#include "models/llama/config/llama_config.h"
#include "tools/strata/cmd_estimate_placement.h"
#include "tools/strata/generate/estimate_inference.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

// The placements' parts: cmd_estimate_placement.h.
using internal::Candidate;
using internal::ConfigJson;
using internal::Disallowed;
using internal::EstimateCliOptions;
using internal::Evaluate;
using internal::Machine;
using internal::ProbeMachine;
using internal::ReadShape;

constexpr const char* kEstimateUsage =
    "strata estimate (--preset NAME | --model HF_DIR | --params N) [--world N] [--nodes N]\n"
    "                [--dtype fp32|fp16|bf16] [--config CFG] [--micro-batch N] [--seq-len N]\n"
    "                [--checkpointing] [--lm-head-chunk auto|N] [--gpu-mem B] [--cpu-mem B]\n"
    "                [--nvme B] [--nvme-path DIR]\n"
    "                [--emit-config] [--json]\n"
    "strata estimate --inference ... (generation: --help with --inference)\n"
    "  Per-rank memory per tier for ZeRO stages 0-3 x offload none/cpu/nvme (or one --config),\n"
    "  fits / does not fit on the machine (default: this one), and the step's traffic.";

int EstimateFail(int code, const std::string& what) {
  std::string line = what;
  for (char& c : line) c = c == '\n' ? ' ' : c;
  std::fprintf(stderr, "strata estimate: %s\n", line.c_str());
  return code;
}

nlohmann::json TrafficJson(const StepTraffic& t, int nodes) {
  return {{"host_to_device_bytes", t.host_to_device_bytes},
          {"device_to_host_bytes", t.device_to_host_bytes},
          {"nvme_read_bytes", t.nvme_read_bytes},
          {"nvme_write_bytes", t.nvme_write_bytes},
          {"collective_bytes", t.collective_bytes},
          {"nominal_seconds", t.NominalSeconds(nodes)}};
}

std::string Col(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s + " ";
}

void PrintText(const EstimateCliOptions& o, const ModelShape& shape, const Machine& m,
               const std::vector<Candidate>& cs, const Candidate* best, int64_t seq_len) {
  std::printf("model: %s, %.3f B params (largest %s), %s, world %lld on %lld node(s)\n",
              shape.name.c_str(), static_cast<double>(shape.NumParameters()) / 1e9,
              std::to_string(shape.LargestParameter()).c_str(), o.dtype.c_str(),
              static_cast<long long>(o.world), static_cast<long long>(o.nodes));
  if (o.params > 0) {
    std::printf("activations: not counted (--params gives no model shape)\n");
  } else {
    // The footprint's note ends ", LM head in chunks of N tokens" when the head is chunked.
    const size_t head = shape.activation_note.find(", LM head");
    std::printf("activations: micro batch %lld x seq %lld%s, %s\n",
                static_cast<long long>(o.micro_batch), static_cast<long long>(seq_len),
                head == std::string::npos ? "" : shape.activation_note.substr(head).c_str(),
                o.checkpointing ? "activation checkpointing" : "no activation checkpointing");
  }
  std::printf("machine: gpu %s (%s)\n         cpu %s (%s)\n         nvme %s (%s)\n\n",
              FormatBytes(m.gpu).c_str(), m.gpu_from.c_str(), FormatBytes(m.cpu).c_str(),
              m.cpu_from.c_str(), FormatBytes(m.nvme).c_str(), m.nvme_from.c_str());
  std::printf("%s%s%s%s%s%s%s\n", Col("stage", 5).c_str(), Col("offload", 7).c_str(),
              Col("device", 11).c_str(), Col("pinned cpu", 11).c_str(), Col("pageable", 11).c_str(),
              Col("nvme", 11).c_str(), "fits       step traffic (pcie / nvme / network)");
  for (const Candidate& c : cs) {
    std::string head = Col(std::to_string(c.stage), 5) + Col(c.offload, 7);
    if (!c.disallowed.empty()) {
      std::printf("%s(not a valid placement: %s)\n", head.c_str(), c.disallowed.c_str());
      continue;
    }
    const StepTraffic& t = c.plan.traffic;
    std::string fits = c.misfit ? "no: " + *c.misfit : "yes";
    if (&c == best) fits += " *";
    std::printf("%s%s%s%s%s%s%s / %s / %s\n", head.c_str(),
                Col(FormatBytes(c.plan.bytes(PlanTier::kDevice)), 11).c_str(),
                Col(FormatBytes(c.plan.bytes(PlanTier::kPinnedCpu)), 11).c_str(),
                Col(FormatBytes(c.plan.bytes(PlanTier::kPageableCpu)), 11).c_str(),
                Col(FormatBytes(c.plan.bytes(PlanTier::kNvme)), 11).c_str(), Col(fits, 10).c_str(),
                FormatBytes(t.host_to_device_bytes + t.device_to_host_bytes).c_str(),
                FormatBytes(t.nvme_read_bytes + t.nvme_write_bytes).c_str(),
                FormatBytes(t.collective_bytes).c_str());
  }
  std::printf(
      "\nper rank; cpu fits when (pinned + pageable) x ranks per node <= cpu, nvme likewise.\n");
  for (const Candidate& c : cs) {
    if (!c.disallowed.empty() || (!c.searched && !c.misfit)) continue;
    std::printf("stage %d %s: ", c.stage, c.offload.c_str());
    if (c.misfit) {
      std::printf("does not fit: %s\n", c.misfit_detail.c_str());
      continue;
    }
    std::string keys;
    for (const auto& [path, value] : c.chosen) {
      keys += (keys.empty() ? "" : ", ") + path.substr(path.find('.') + 1) + " " +
              std::to_string(value);
    }
    std::printf("buffers sized within %s CPU per rank (minimum pipeline %s): %s\n",
                FormatBytes(c.cpu_budget).c_str(), FormatBytes(c.minimum_cpu).c_str(),
                keys.empty() ? "as written" : keys.c_str());
  }
  if (best != nullptr) {
    std::printf(
        "least traffic that fits (*): stage %d, offload %s (strata estimate ... "
        "--emit-config prints its config)\n",
        best->stage, best->offload.c_str());
  } else {
    std::printf("nothing fits this machine\n");
  }
}

int RunEstimate(const std::vector<std::string>& args) {
  // --inference: generation's bytes per tier (tools/strata/generate/estimate_inference.h).
  if (std::find(args.begin(), args.end(), "--inference") != args.end()) {
    return RunInferenceEstimate(args);
  }
  EstimateCliOptions o;
  FlagParser flags(kEstimateUsage);
  flags.String("preset", &o.preset, "a preset: " + llama::LlamaPresetNames());
  flags.String("model", &o.model, "a Hugging Face Llama directory (reads config.json)");
  flags.Int("params", &o.params, "a bare parameter count (no activations)", 1);
  flags.Int("largest-layer", &o.largest_layer,
            "with --params: elements of the largest layer (default params / 64)", 1);
  flags.Int("world", &o.world, "data-parallel ranks (GPUs) in all", 1, 1 << 20);
  flags.Int("nodes", &o.nodes, "machines the ranks are spread over", 1, 1 << 16);
  flags.Choice("dtype", &o.dtype, {"fp32", "fp16", "bf16"}, "compute dtype (without --config)");
  flags.String("config", &o.config, "one DeepSpeed config instead of all placements");
  flags.Int("micro-batch", &o.micro_batch, "sequences per micro-batch (activations)", 1);
  flags.Int("seq-len", &o.seq_len, "tokens per sequence (default min(2048, the model's))", 1);
  flags.Bool("checkpointing", &o.checkpointing, "activation checkpointing");
  flags.String("lm-head-chunk", &o.lm_head_chunk,
               "tokens per chunk of the LM head + loss: auto (strata.lm_head_chunk's default), 0 "
               "(whole logits) or N");
  flags.Bytes("gpu-mem", &o.gpu_mem, "device memory per rank (default: the host-emulated device)");
  flags.Bytes("cpu-mem", &o.cpu_mem, "CPU memory per node (default: this machine's)");
  flags.Bytes("nvme", &o.nvme, "NVMe space per node (default: free space at --nvme-path)");
  flags.String("nvme-path", &o.nvme_path, "swap directory (default: the working directory)");
  flags.Bool("emit-config", &o.emit_config, "print the fitting config with the least traffic");
  flags.Bool("json", &o.json, "print one JSON object");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return EstimateFail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) return EstimateFail(2, "unexpected argument '" + positional[0] + "'");
  const int sources = !o.preset.empty() + !o.model.empty() + (o.params > 0);
  if (sources != 1) {
    return EstimateFail(2, "give exactly one of --preset NAME (" + llama::LlamaPresetNames() +
                               "), --model HF_DIR or "
                               "--params N");
  }
  if (o.nodes > o.world) {
    return EstimateFail(2, "--nodes " + std::to_string(o.nodes) + " is more than --world " +
                               std::to_string(o.world) + " (each node runs at least one rank)");
  }
  if (o.emit_config && !o.config.empty()) {
    return EstimateFail(
        2, "--emit-config chooses among all placements; it cannot be used with --config");
  }
  int64_t hidden = 0, seq_len = 0;
  std::vector<std::string> names;
  Result<ModelShape> shape = ReadShape(o, &hidden, &seq_len, &names);
  if (!shape.ok()) return EstimateFail(2, shape.status().message());
  Machine m = ProbeMachine(o, flags);
  const std::string nvme_path = o.nvme_path.empty() ? "/local_nvme" : o.nvme_path;

  RunContext run;
  run.world_size = o.world;
  run.micro_batch_per_gpu = o.micro_batch;
  run.precision = o.dtype;
  if (hidden > 0) run.hidden_size = hidden;
  std::vector<Candidate> cs;
  // The sweep's NVMe placements choose every sizing key within the CPU budget; --config only
  // the ones it writes "auto".
  auto add = [&](int stage, const std::string& offload, const Config& config, std::string json,
                 const std::vector<std::string>& free_keys) -> Status {
    Candidate c;
    c.stage = stage, c.offload = offload, c.config_json = std::move(json);
    STRATA_RETURN_IF_ERROR(Evaluate(*shape, config, o, m, free_keys, names, &c));
    if (c.searched && !c.config_json.empty()) {
      c.config_json = ConfigJson(o, stage, offload, nvme_path, c.chosen, c.cpu_budget);
    }
    cs.push_back(std::move(c));
    return Status::Ok();
  };
  if (!o.config.empty()) {
    Result<Config> config = LoadConfig(o.config, run);
    if (!config.ok()) return EstimateFail(2, config.status().message());
    const ZeroConfig& z = config->zero;
    const OffloadDevice d = z.stage == 3 && z.offload_param.device != OffloadDevice::kNone
                                ? z.offload_param.device
                                : z.offload_optimizer.device;
    o.dtype = config->bf16.enabled ? "bf16" : config->fp16.enabled ? "fp16" : "fp32";
    o.micro_batch = config->batch.micro_batch_per_gpu;  // the activations of the config's batch
    shape = ReadShape(o, &hidden, &seq_len, &names);
    if (!shape.ok()) return EstimateFail(2, shape.status().message());
    if (!flags.WasSet("gpu-mem")) {  // the emulated device the config asks for, as train makes
      m.gpu = config->strata.device_memory_bytes;
      m.gpu_from = "strata.device_memory of --config (the host-emulated device); no GPU assumed";
    }
    if (Status s = add(static_cast<int>(z.stage), std::string(OffloadDeviceName(d)), *config, "",
                       z.auto_sizes);
        !s.ok()) {
      return EstimateFail(2, s.message());
    }
  } else {
    for (int stage = 0; stage <= 3; ++stage) {
      for (const std::string offload : {"none", "cpu", "nvme"}) {
        if (std::string why = Disallowed(stage, offload); !why.empty()) {
          Candidate c;
          c.stage = stage, c.offload = offload, c.disallowed = why;
          cs.push_back(std::move(c));
          continue;
        }
        const std::string json = ConfigJson(o, stage, offload, nvme_path);
        Result<Config> config = LoadConfigText(json, "<estimate>", run);
        if (!config.ok())
          return EstimateFail(1, "internal: generated config: " + config.status().message());
        if (Status s = add(stage, offload, *config, json, BudgetSizingKeys()); !s.ok()) {
          return EstimateFail(2, s.message());
        }
      }
    }
  }
  const Candidate* best = nullptr;
  for (const Candidate& c : cs) {
    if (!c.disallowed.empty() || c.misfit) continue;
    if (best == nullptr || c.plan.traffic.NominalSeconds(static_cast<int>(o.nodes)) <
                               best->plan.traffic.NominalSeconds(static_cast<int>(o.nodes))) {
      best = &c;
    }
  }
  if (o.emit_config) {
    if (best == nullptr)
      return EstimateFail(1, "no placement fits this machine (see strata estimate)");
    std::printf("%s\n", best->config_json.c_str());
    return 0;
  }
  if (o.json) {
    nlohmann::json j;
    j["model"] = {{"name", shape->name},
                  {"params", shape->NumParameters()},
                  {"largest_param", shape->LargestParameter()}};
    j["world"] = o.world, j["nodes"] = o.nodes, j["dtype"] = o.dtype;
    j["micro_batch"] = o.micro_batch, j["seq_len"] = seq_len;
    j["checkpointing"] = o.checkpointing, j["activations_counted"] = o.params == 0;
    j["machine"] = {{"gpu_bytes", m.gpu},     {"cpu_bytes", m.cpu},     {"nvme_bytes", m.nvme},
                    {"gpu_from", m.gpu_from}, {"cpu_from", m.cpu_from}, {"nvme_from", m.nvme_from}};
    nlohmann::json rows = nlohmann::json::array();
    for (const Candidate& c : cs) {
      nlohmann::json r = {{"stage", c.stage}, {"offload", c.offload}};
      if (!c.disallowed.empty()) {
        r["valid"] = false, r["reason"] = c.disallowed;
        rows.push_back(r);
        continue;
      }
      r["valid"] = true;
      r["placement"] = c.plan.placement;
      nlohmann::json per_rank;
      for (PlanTier t : kAllPlanTiers) per_rank[std::string(PlanTierKey(t))] = c.plan.bytes(t);
      r["per_rank_bytes"] = per_rank;
      r["per_node_cpu_bytes"] = c.cpu_per_node;
      r["per_node_nvme_bytes"] = c.nvme_per_node;
      r["fits"] = !c.misfit.has_value();
      r["does_not_fit"] = c.misfit ? nlohmann::json(*c.misfit) : nlohmann::json(nullptr);
      if (c.misfit) r["does_not_fit_detail"] = c.misfit_detail;
      if (c.searched) {
        nlohmann::json chosen = nlohmann::json::object();
        for (const auto& [path, value] : c.chosen) chosen[path] = value;
        r["cpu_budget_per_rank_bytes"] = c.cpu_budget;
        r["minimum_cpu_bytes"] = c.minimum_cpu;
        r["chosen"] = chosen;
      }
      r["traffic"] = TrafficJson(c.plan.traffic, static_cast<int>(o.nodes));
      nlohmann::json items = nlohmann::json::array();
      for (const PlanItem& it : c.plan.items) {
        items.push_back({{"what", it.what}, {"tier", PlanTierKey(it.tier)}, {"bytes", it.bytes}});
      }
      r["items"] = items;
      rows.push_back(r);
    }
    j["placements"] = rows;
    j["best"] = best == nullptr
                    ? nlohmann::json(nullptr)
                    : nlohmann::json{{"stage", best->stage}, {"offload", best->offload}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  PrintText(o, *shape, m, cs, best, seq_len);
  if (!o.config.empty() && !cs.empty()) std::printf("\n%s", FormatPlanItems(cs[0].plan).c_str());
  return 0;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(estimate, "estimate",
                  "per-tier memory of ZeRO placements and whether they fit: `strata estimate "
                  "--preset 7b --world 8`",
                  strata::cli::RunEstimate);
