#include "tests/engine/coordinator/flag_lm.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace strata::testing {

FlagLM::FlagLM(std::unique_ptr<llama::LlamaForCausalLM> inner, const std::string& probe)
    : nn::CausalLM(""), inner_(std::move(inner)) {
  RegisterModule(inner_.get());
  AssignNames();
  for (nn::Module* m : Modules()) {
    if (m->name() == probe) probe_ = m;
  }
  EXPECT_NE(probe_, nullptr) << "no module " << probe;
}

Status FlagLM::Backward(const nn::RunContext& ctx, float loss_scale) {
  if (extra_ && probe_ != nullptr) {  // gathers and releases the probe's parameters, no math
    STRATA_RETURN_IF_ERROR(probe_->RunHooks(nn::HookPoint::kPreForward, ctx));
    STRATA_RETURN_IF_ERROR(probe_->RunHooks(nn::HookPoint::kPostForward, ctx));
  }
  return inner_->Backward(ctx, loss_scale);
}

std::string Describe(const PrefetchRun& r) {
  return "param " + r.param + (r.tied ? " tied" : "") + (r.checkpointing ? " checkpointing" : "") +
         " bucket " + std::to_string(r.bucket) + " max_live " + std::to_string(r.max_live) +
         " reuse " + std::to_string(r.reuse) + " gas " + std::to_string(r.gas);
}

namespace {

std::string NvmePath(int rank) {
  const std::string dir = ::testing::TempDir() + "strata_coordinator_nvme_" +
                          std::to_string(::getpid()) + "_" + std::to_string(rank);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

PrefetchOutcome TrainPrefetch(Communicator& comm, const PrefetchRun& run, const TokenData& data) {
  constexpr int64_t kPersistence = 200;
  PrefetchOutcome out;
  auto device = MakeHostDevice();
  FlagLM model(MakeTinyModel(device.get(), DType::kFloat32, run.tied, run.checkpointing),
               run.probe);
  for (nn::Module* m : model.Modules()) {
    uint64_t n = 0;
    for (const nn::Parameter* p : m->own_parameters()) {
      if (p->numel() > kPersistence) n += static_cast<uint64_t>(p->numel());
    }
    for (const nn::Parameter* p : m->external_parameters()) {
      if (p->numel() > kPersistence) n += static_cast<uint64_t>(p->numel());
    }
    out.largest_module_numel = std::max(out.largest_module_numel, n);
  }
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 5000, \"reduce_bucket_size\": 40000, "
      "\"stage3_param_persistence_threshold\": " +
      std::to_string(kPersistence) +
      ", \"stage3_prefetch_bucket_size\": " + std::to_string(run.bucket) +
      ", \"stage3_max_live_parameters\": " + std::to_string(run.max_live) +
      ", \"stage3_max_reuse_distance\": " + std::to_string(run.reuse) +
      ", \"offload_param\": {\"device\": \"" + run.param + "\", \"pin_memory\": false" +
      (run.param == "nvme"
           ? ", \"nvme_path\": \"" + NvmePath(comm.rank()) +
                 "\", \"buffer_count\": 4, \"buffer_size\": 60000" +
                 (run.max_in_cpu >= 0 ? ", \"max_in_cpu\": " + std::to_string(run.max_in_cpu)
                                      : std::string()) +
                 "}, "
                 "\"offload_optimizer\": {\"device\": \"cpu\", "
                 "\"pin_memory\": false}"
           : std::string("}"));
  const Config config = MakeConfig(data.batch, run.gas, zero, run.extra, comm.world_size(), 0.5);
  EngineInit init;
  init.init_param = TestInit(17);
  Result<std::unique_ptr<Engine>> engine = Engine::Initialize(model, config, comm, *device, init);
  if (!engine.ok()) {
    out.status = engine.status();
    return out;
  }
  Engine& e = **engine;
  size_t next = static_cast<size_t>(comm.rank());
  for (int step = 1; step <= run.steps && out.status.ok(); ++step) {
    model.set_extra_hooks(step == run.extra_hooks_step &&
                          (run.extra_hooks_rank < 0 || run.extra_hooks_rank == comm.rank()));
    uint64_t rows = 0;
    for (int64_t m = 0; m < run.gas && out.status.ok(); ++m) {
      rows += std::set<int32_t>(data.ids[next].begin(), data.ids[next].end()).size();
      out.status = e.Forward(data.Batch(next));
      next += static_cast<size_t>(comm.world_size());
      if (out.status.ok()) out.status = e.Backward();
    }
    if (out.status.ok()) out.status = e.Step();
    out.embedding_rows.push_back(rows);
    out.stats_per_step.push_back(e.stats());
    out.breakdowns.push_back(e.last_breakdown());
  }
  out.stats = e.stats();
  const auto named = model.NamedParameters();
  for (size_t i = 0; i < named.size(); ++i) {
    if (named[i]->name().ends_with("embed_tokens.weight")) {
      out.embedding = i;
      out.embedding_row_bytes = static_cast<uint64_t>(named[i]->shape()[1]) * sizeof(float);
    }
  }
  for (size_t i = 0; i < e.layout().slices().size(); ++i) {
    const ShardSlice& s = e.layout().slices()[i];
    out.shard_bytes.push_back(s.shard_numel * sizeof(float));
    out.persistent.push_back(s.numel <= static_cast<size_t>(kPersistence));
  }
  if (!out.status.ok()) return out;
  for (size_t i = 0; i < e.layout().slices().size() && out.status.ok(); ++i) {
    std::vector<float> v(e.layout().slices()[i].numel);
    out.status = e.GatherMasterParameter(i, v);  // a collective: every rank calls it
    out.masters.push_back(std::move(v));
  }
  return out;
}

}  // namespace strata::testing
