// EngineRun: one strata::Engine training a Llama on its own host-emulated device (capped memory,
// paced link), built from a DeepSpeed config — what bench/overlap and bench/scale drive. The
// device, model and engine are owned together and destroyed in the right order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/overlap/bound_parts.h"
#include "core/status.h"
#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/plan/memory_plan.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"

namespace strata::bench {

// The engine's memory plan of a one-rank Llama run at `seq_len` (the model's footprint,
// models/llama/llama_footprint.h, under `config`), as `strata train` plans it.
Result<MemoryPlan> PlanLlamaRun(const llama::LlamaConfig& model, const Config& config,
                                int64_t seq_len);

struct EngineRunOptions {
  std::string name;  // for messages: "overlapped", "serial"
  llama::LlamaConfig model;
  std::string config_json;  // a DeepSpeed config (strata.device_memory and link_gbps apply)
  int64_t seq_len = 64;     // for the memory plan's activations
  uint64_t seed = 1;
  TierBudget* budget = nullptr;  // null: the engine's own
};

// Wall times of one step (Forward, Backward, Step, then the loss read), the process's CPU
// seconds during it (all threads), and the engine's own breakdown of it.
struct EngineStepResult {
  double total_s = 0;
  double cpu_s = 0;
  std::map<std::string, ThreadCpu> threads;  // by thread name (bound_parts.h ThreadCpuDelta)
  float loss = 0;
  StepBreakdown breakdown;
};

class EngineRun {
 public:
  // Loads the config, plans the run (world 1) and checks the plan fits the device before
  // placing anything; errors from Engine::Initialize come back as they are (e.g. Unimplemented
  // for a placement not built yet), prefixed with the run's name.
  static Result<std::unique_ptr<EngineRun>> Create(const EngineRunOptions& options);
  ~EngineRun();

  // One optimizer step (gradient_accumulation_steps 1): synchronous. The step may leave I/O in
  // flight (the overlapped step's NVMe writes), which then runs into whatever comes next.
  Result<EngineStepResult> Step(const nn::TokenBatch& batch);
  // The steady state, timed without leaking into what is measured next: one step untimed (so
  // the first timed one inherits a step's I/O in flight, as every step does in training), then
  // `timed` consecutive steps, each timed, then Engine::Synchronize (untimed: the last step's
  // writes land in no other measurement).
  Result<std::vector<EngineStepResult>> SteadySteps(const nn::TokenBatch& batch, int64_t timed);

  const Config& config() const { return config_; }
  const MemoryPlan& plan() const { return plan_; }
  Device& device() { return *device_; }
  Engine& engine() { return *engine_; }

 private:
  EngineRun() = default;
  std::string name_;
  Config config_;
  MemoryPlan plan_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<llama::LlamaForCausalLM> model_;
  std::unique_ptr<Engine> engine_;
};

// Normal(0, 0.02) by (seed, parameter index), norms 1 (the same as `strata train --init`).
ParamInitFn RandomParamInit(uint64_t seed);

// Token ids of `numel` tokens, deterministic by `seed`, below `vocab`.
std::vector<int32_t> RandomTokens(size_t numel, int64_t vocab, uint64_t seed);

// Bytes of the state one rank holds per parameter in the model + optimizer (compute-dtype
// params, fp32 master, Adam m and v): what "params + optimizer state" means in the benches.
uint64_t ModelAndOptimizerBytes(const llama::LlamaConfig& model, DType compute_dtype);

}  // namespace strata::bench
