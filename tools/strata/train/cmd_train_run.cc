// Building `strata train`'s run (cmd_train_run.h): the model's shape, the config (read as `strata
// config check` reads it), the data (a token or text file, the text the project ships, or a JSONL
// dataset), then the device, the communicator, the model and the engine, once the run's plan is
// known to fit the machine's memory and its disks.
#include "tools/strata/train/cmd_train_run.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/units.h"
#include "engine/comm/launch/launch_env.h"
#include "engine/comm/registry.h"
#include "engine/config/auto_sizes.h"
#include "nn/modules/lm/lm_head_loss.h"
#include "offload/device/registry.h"
#include "tools/strata/train/cmd_train_memory.h"
#include "tools/strata/train/cmd_train_space.h"

namespace strata::cli::internal {
namespace {

Status OpenTokenData(const Options& o, Run* r);
Status SetupEngine(const Options& o, Run* r, const LaunchEnv& env, int* exit_code);

// Disk space the run needs before it starts: one checkpoint in --save's directory (the ranks'
// shards together; every rank checks it, so that all refuse together rather than some waiting
// in the engine's first collective for one that refused), and the swap bytes in the nvme_path
// directories (spread evenly over them, as the swap space stripes) of every rank on this node,
// whose swap files share those directories (each plans as much as this one: the partitions are
// even), less what swap files of a killed run's ranks on this node already hold.
std::vector<SpaceNeed> DiskNeeds(const Options& o, const Run& r, const LaunchEnv& env) {
  std::vector<SpaceNeed> needs;
  if (!o.ckpt.save.empty()) {
    needs.push_back({o.ckpt.save,
                     CheckpointBytes(static_cast<uint64_t>(r.model_config.NumParameters())),
                     "--save"});
  }
  std::vector<std::string> dirs;
  const ZeroConfig& z = r.config.zero;
  for (const auto* paths :
       {z.offload_param.device == OffloadDevice::kNvme ? &z.offload_param.nvme_paths : nullptr,
        z.offload_optimizer.device == OffloadDevice::kNvme ? &z.offload_optimizer.nvme_paths
                                                           : nullptr}) {
    if (paths == nullptr) continue;
    for (const std::string& d : *paths) {
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  }
  const int local = std::max(1, env.local_world_size);
  const int first_local = r.rank - env.local_rank;
  for (const std::string& d : dirs) {
    const uint64_t per_rank = r.plan.bytes(PlanTier::kNvme) / dirs.size();
    needs.push_back({d, per_rank * static_cast<uint64_t>(local), "nvme_path",
                     ExistingSwapBytes(d, first_local, local),
                     local > 1 ? FormatBytes(per_rank) + " for each of the " +
                                     std::to_string(local) + " ranks on this node"
                               : ""});
  }
  return needs;
}

}  // namespace

Status Setup(const Options& o, Run* r, int* exit_code) {
  *exit_code = 2;
  // The model's shape first: the config's hidden-size-based "auto" keys need it.
  if (!o.init.empty()) {
    STRATA_ASSIGN_OR_RETURN(r->model_config, llama::LlamaPreset(o.init));
    if (o.vocab_size > 0) r->model_config.vocab_size = o.vocab_size;
  } else {
    STRATA_ASSIGN_OR_RETURN(r->model_config, llama::ReadLlamaConfig(o.model));
  }
  STRATA_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  RunContext run;
  run.world_size = env.world_size;
  run.total_num_steps = o.steps;
  run.hidden_size = r->model_config.hidden_size;
  STRATA_ASSIGN_OR_RETURN(r->config, LoadConfig(o.config, run));

  // Data before any memory is placed: a mismatch is the user's to fix.
  STRATA_RETURN_IF_ERROR(llama::CheckSequenceLength(r->model_config, o.seq_len,
                                                    "--seq-len " + std::to_string(o.seq_len)));
  if (o.data.ends_with(".jsonl")) {
    STRATA_ASSIGN_OR_RETURN(
        data::PreparedSampler prepared,
        OpenJsonlData(o.data, o.model, o.data_cache, o.train_on == "all", o.seq_len,
                      static_cast<uint64_t>(o.seed), r->model_config.vocab_size, o.packing,
                      env.rank == 0 && !o.json));
    r->prepared.emplace(std::move(prepared));
  } else {
    STRATA_RETURN_IF_ERROR(OpenTokenData(o, r));
  }
  return SetupEngine(o, r, env, exit_code);
}

namespace {

Status OpenTokenData(const Options& o, Run* r) {
  STRATA_ASSIGN_OR_RETURN(data::TokenFile file,
                          o.data.empty() ? ShippedText() : data::TokenFile::Open(o.data));
  r->tokens.emplace(std::move(file));
  const std::string& path = r->tokens->path();
  const int64_t vocab = r->model_config.vocab_size;
  if (r->tokens->format() == data::TokenFormat::kBytes && vocab < 256) {
    return InvalidArgumentError("the model's vocab_size " + std::to_string(vocab) +
                                " is smaller than the byte-level ids (0-255) of text file " + path);
  }
  STRATA_ASSIGN_OR_RETURN(
      data::SequenceSampler sampler,
      data::SequenceSampler::Create(&*r->tokens, o.seq_len, static_cast<uint64_t>(o.seed), vocab,
                                    data::LabelStyle::kHuggingFace));
  r->sampler.emplace(std::move(sampler));
  return Status::Ok();
}

Status SetupEngine(const Options& o, Run* r, const LaunchEnv& env, int* exit_code) {
  const Config& c = r->config;
  *exit_code = 1;
  DeviceOptions dev;
  dev.host.memory_bytes = c.strata.device_memory_bytes;
  dev.host.link_bandwidth_gbps = c.strata.link_gbps;
  dev.host.populate_memory = false;
  // strata.device = cuda runs on the GPU (Unavailable without one); auto stays on the emulated
  // device until the engine reads its optimizer state through OptimizerState::Read/Write.
  if (c.strata.device == DeviceChoice::kCuda) dev.kind = DeviceKind::kCuda;
  STRATA_ASSIGN_OR_RETURN(r->device, CreateDevice(dev));
  r->mem_sampler = std::make_unique<PageableSampler>(*r->device, r->budget, r->mem_base);
  CommOptions co;
  co.device_kind = dev.kind;
  co.backend = c.strata.comm_backend;
  co.timeout_s = c.strata.comm_timeout_s;
  co.log_choice = env.launched();
  STRATA_ASSIGN_OR_RETURN(r->comm, CreateCommunicator(co));
  r->rank = r->comm->rank();
  r->world = r->comm->world_size();

  llama::LlamaModelOptions mo;
  mo.dtype = c.bf16.enabled ? DType::kBFloat16 : c.fp16.enabled ? DType::kFloat16 : DType::kFloat32;
  mo.allocate_parameters = false;
  mo.allocate_grads = false;
  // A preset has no source dtype: its saved config.json (and so an export's default) says the
  // run's.
  if (!o.init.empty()) r->model_config.torch_dtype = mo.dtype;
  static_assert(StrataConfig::kLmHeadChunkAuto == nn::LmHeadLoss::kAutoChunk);
  mo.lm_head_chunk_tokens = c.strata.lm_head_chunk;
  STRATA_ASSIGN_OR_RETURN(r->model,
                          llama::LlamaForCausalLM::Create(r->model_config, r->device.get(), mo));
  EngineInit init;
  init.budget = &r->budget;
  // A large model's initial values (its NVMe state) take a while: a line every few seconds.
  init.progress = [](const InitProgress& p) {
    std::fprintf(stderr,
                 "strata: writing the initial values: %lld of %lld parameters (%.0f%%), %.0f s\n",
                 static_cast<long long>(p.params_done), static_cast<long long>(p.params_total),
                 100.0 * static_cast<double>(p.elements_done) /
                     static_cast<double>(std::max<uint64_t>(p.elements_total, 1)),
                 p.seconds);
  };
  if (!o.init.empty()) {
    init.init_param = RandomInit(static_cast<uint64_t>(o.seed));
  } else {
    STRATA_ASSIGN_OR_RETURN(init.init_param, CheckpointInit(o.model));
  }
  {
    // "auto" sizing keys that depend on the model, settled before the plan (the engine does the
    // same for itself: its copy comes out equal).
    std::vector<size_t> numels;
    for (const nn::Parameter* p : r->model->NamedParameters()) {
      numels.push_back(static_cast<size_t>(p->numel()));
    }
    ResolveModelAutoSizes(&r->config, numels, c.zero.stage >= 1 ? r->world : 1);
  }
  {
    // strata.cpu_memory: the "auto" sizing keys chosen within it (the engine keeps the choice);
    // the pinned tier is held to what the plan's pageable part leaves of it.
    STRATA_ASSIGN_OR_RETURN(
        BudgetPlan b, PlanTrainRunWithinBudget(r->model_config, c, r->world, r->rank, o.seq_len,
                                               {.save = !o.ckpt.save.empty(),
                                                .export_weights = !o.ckpt.export_dir.empty()}));
    r->config = std::move(b.config);
    r->plan = std::move(b.plan);
    const uint64_t cpu = r->config.strata.cpu_memory_bytes;
    const uint64_t pageable = r->plan.bytes(PlanTier::kPageableCpu);
    if (cpu > 0) r->budget.SetLimit(Tier::kCpu, cpu > pageable ? cpu - pageable : 1);
  }
  STRATA_RETURN_IF_ERROR(CheckTrainRunFits(r->plan, *r->device, r->budget));
  STRATA_RETURN_IF_ERROR(CheckDiskSpace(DiskNeeds(o, *r, env)));
  STRATA_ASSIGN_OR_RETURN(r->engine,
                          Engine::Initialize(*r->model, r->config, *r->comm, *r->device, init));
  return Status::Ok();
}

}  // namespace
}  // namespace strata::cli::internal
