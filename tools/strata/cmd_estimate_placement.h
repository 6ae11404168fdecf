// `strata estimate`'s placements, shared by cmd_estimate.cc (the command, its sweep and its
// output) and cmd_estimate_placement.cc (what each placement needs and whether it fits): the
// options, the machine checked against, the model's shape as the planner sees it, and one ZeRO
// placement's plan. Private to those two files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/flags.h"
#include "core/status.h"
#include "engine/config/config.h"
#include "engine/plan/memory_plan.h"

namespace strata::cli::internal {

struct EstimateCliOptions {
  std::string preset, model, config, dtype = "bf16", nvme_path, lm_head_chunk = "auto";
  int64_t params = 0, largest_layer = 0, world = 1, nodes = 1, micro_batch = 1, seq_len = 0;
  bool checkpointing = false, emit_config = false, json = false;
  uint64_t gpu_mem = 0, cpu_mem = 0, nvme = 0;
};

struct Machine {
  uint64_t gpu = 0, cpu = 0, nvme = 0;
  std::string gpu_from, cpu_from, nvme_from;
};

// Device, CPU and NVMe bytes: the flags given, else this machine's (the host-emulated device's
// default, MemTotal, the free space at --nvme-path), each with where it came from.
Machine ProbeMachine(const EstimateCliOptions& o, const FlagParser& flags);

// The model as the planner sees it, from --params, --preset or --model; sets *hidden (a Llama's
// hidden size), *seq_len and *names (a Llama's parameter names).
Result<ModelShape> ReadShape(const EstimateCliOptions& o, int64_t* hidden, int64_t* seq_len,
                             std::vector<std::string>* names);

struct Candidate {
  int stage = 0;
  std::string offload;  // none, cpu, nvme
  std::string disallowed;
  std::string config_json;  // what --emit-config prints
  MemoryPlan plan;
  uint64_t cpu_per_node = 0, nvme_per_node = 0;
  std::optional<std::string> misfit;  // the tier that does not fit
  std::string misfit_detail;          // what does not fit, in words
  // NVMe placements: the sizing keys chosen within the CPU budget (engine/plan/cpu_budget.h).
  bool searched = false;
  uint64_t cpu_budget = 0;  // per rank: --cpu-mem / ranks per node
  uint64_t minimum_cpu = 0;
  std::vector<std::pair<std::string, int64_t>> chosen;
};

// The DeepSpeed config of one placement, with the sizing keys chosen within the CPU budget.
std::string ConfigJson(const EstimateCliOptions& o, int stage, const std::string& offload,
                       const std::string& nvme_path,
                       const std::vector<std::pair<std::string, int64_t>>& chosen = {},
                       uint64_t cpu_budget = 0);

// Why (stage, offload) is not a valid placement, or "".
std::string Disallowed(int stage, const std::string& offload);

// Plans `config` for the model into *c (NVMe placements: `free_keys` chosen within the CPU
// budget) and says which tier of the machine it does not fit, if any.
Status Evaluate(const ModelShape& shape, const Config& config, const EstimateCliOptions& o,
                const Machine& m, const std::vector<std::string>& free_keys,
                const std::vector<std::string>& names, Candidate* c);

}  // namespace strata::cli::internal
