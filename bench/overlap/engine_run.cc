#include "bench/overlap/engine_run.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "bench/overlap/bound_parts.h"
#include "engine/comm/registry.h"
#include "engine/plan/run_memory.h"
#include "models/llama/llama_footprint.h"
#include "models/llama/llama_init.h"
#include "offload/device/registry.h"

namespace strata::bench {

Result<MemoryPlan> PlanLlamaRun(const llama::LlamaConfig& model, const Config& config,
                                int64_t seq_len) {
  return PlanEngineMemory(llama::LlamaFootprint(model, config.batch.micro_batch_per_gpu, seq_len),
                          config, PlanOptions{});
}

Result<std::unique_ptr<EngineRun>> EngineRun::Create(const EngineRunOptions& o) {
  std::unique_ptr<EngineRun> r(new EngineRun());
  r->name_ = o.name;
  RunContext run;
  run.world_size = 1;
  run.hidden_size = o.model.hidden_size;
  STRATA_ASSIGN_OR_RETURN(r->config_, LoadConfigText(o.config_json, o.name, run));
  const Config& c = r->config_;
  STRATA_ASSIGN_OR_RETURN(r->plan_, PlanLlamaRun(o.model, c, o.seq_len));

  DeviceOptions dev;
  dev.host.memory_bytes = c.strata.device_memory_bytes;
  dev.host.link_bandwidth_gbps = c.strata.link_gbps;
  dev.host.populate_memory = false;
  STRATA_ASSIGN_OR_RETURN(r->device_, CreateDevice(dev));
  TierBudget unlimited;
  STRATA_RETURN_IF_ERROR(CheckTrainRunFits(r->plan_, *r->device_, o.budget ? *o.budget : unlimited)
                             .WithContext(o.name));
  CommOptions co;
  co.backend = CommBackend::kLocal;
  STRATA_ASSIGN_OR_RETURN(r->comm_, CreateCommunicator(co));

  llama::LlamaModelOptions mo;
  mo.dtype = c.bf16.enabled ? DType::kBFloat16 : c.fp16.enabled ? DType::kFloat16 : DType::kFloat32;
  mo.allocate_parameters = false;
  mo.allocate_grads = false;
  STRATA_ASSIGN_OR_RETURN(r->model_,
                          llama::LlamaForCausalLM::Create(o.model, r->device_.get(), mo));
  EngineInit init;
  init.init_param = RandomParamInit(o.seed);
  init.budget = o.budget;
  Result<std::unique_ptr<Engine>> e =
      Engine::Initialize(*r->model_, r->config_, *r->comm_, *r->device_, init);
  if (!e.ok()) return e.status().WithContext(o.name);
  r->engine_ = std::move(e).value();
  return r;
}

EngineRun::~EngineRun() {
  engine_.reset();  // before the model, communicator and device it uses
  model_.reset();
  comm_.reset();
}

Result<EngineStepResult> EngineRun::Step(const nn::TokenBatch& batch) {
  using Clock = std::chrono::steady_clock;
  EngineStepResult out;
  const std::map<int, ThreadCpu> threads0 = ThreadCpuSeconds();
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(engine_->Forward(batch));
  STRATA_RETURN_IF_ERROR(engine_->Backward());
  STRATA_RETURN_IF_ERROR(engine_->Step());  // returns with its streams drained
  STRATA_ASSIGN_OR_RETURN(out.loss, engine_->Loss());
  out.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  out.cpu_s = ProcessCpuSeconds() - cpu0;
  out.threads = ThreadCpuDelta(threads0, ThreadCpuSeconds());
  out.breakdown = engine_->last_breakdown();
  return out;
}

Result<std::vector<EngineStepResult>> EngineRun::SteadySteps(const nn::TokenBatch& batch,
                                                             int64_t timed) {
  STRATA_RETURN_IF_ERROR(Step(batch).status());
  std::vector<EngineStepResult> out;
  for (int64_t k = 0; k < timed; ++k) {
    STRATA_ASSIGN_OR_RETURN(EngineStepResult r, Step(batch));
    out.push_back(std::move(r));
  }
  STRATA_RETURN_IF_ERROR(engine_->Synchronize().WithContext(name_));
  return out;
}

ParamInitFn RandomParamInit(uint64_t seed) { return llama::RandomInit(seed); }

std::vector<int32_t> RandomTokens(size_t numel, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(numel);
  uint64_t x = seed * 2654435761u + 12345;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

uint64_t ModelAndOptimizerBytes(const llama::LlamaConfig& model, DType compute_dtype) {
  return static_cast<uint64_t>(model.NumParameters()) * (DTypeBytes(compute_dtype) + 12);
}

}  // namespace strata::bench
