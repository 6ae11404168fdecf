// Test helpers for the ParamCoordinator suites: a tiny Llama wrapped in a CausalLM that, when
// asked, runs one module's forward hooks out of order (between forward and backward) — a model
// whose module order depends on a flag — and a stage-3 training run with prefetch settings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/engine.h"
#include "models/llama/model/llama_model.h"
#include "nn/modules/lm/causal_lm.h"
#include "offload/device/api/device.h"
#include "tests/engine/train/engine_fixture.h"

namespace strata::testing {

class FlagLM final : public nn::CausalLM {
 public:
  // `probe`: the module (full name) whose forward hooks run out of order when the flag is set.
  FlagLM(std::unique_ptr<llama::LlamaForCausalLM> inner, const std::string& probe);
  const char* type_name() const override { return "FlagLM"; }
  void set_extra_hooks(bool on) { extra_ = on; }

  Status Forward(const nn::RunContext& ctx, const nn::TokenBatch& batch) override {
    return inner_->Forward(ctx, batch);
  }
  Status Backward(const nn::RunContext& ctx, float loss_scale) override;
  nn::Tensor logits() const override { return inner_->logits(); }
  const float* loss_device() const override { return inner_->loss_device(); }

 private:
  std::unique_ptr<llama::LlamaForCausalLM> inner_;
  nn::Module* probe_ = nullptr;
  bool extra_ = false;
};

struct PrefetchRun {
  std::string param = "none";  // offload_param.device
  bool tied = false, checkpointing = false;
  int64_t bucket = 0;  // stage3_prefetch_bucket_size (0: off)
  int64_t max_live = 1000000000, reuse = 1000000000;
  int steps = 3;
  int64_t gas = 1;
  int extra_hooks_step = 0;   // 1-based step whose passes run the probe's hooks (0: none)
  int extra_hooks_rank = -1;  // only this rank (-1: all)
  std::string probe = "model.layers.1.mlp.up_proj";
  std::string extra;        // top-level config keys, each followed by ", " (e.g. a strata section)
  int64_t max_in_cpu = -1;  // offload_param nvme: max_in_cpu (-1: the default)
};

struct PrefetchOutcome {
  std::vector<std::vector<float>> masters;
  EngineStats stats;
  std::vector<EngineStats> stats_per_step;
  Status status;                          // the first error of a Forward/Backward/Step
  uint64_t largest_module_numel = 0;      // non-persistent elements of the largest module
  std::vector<StepBreakdown> breakdowns;  // Engine::last_breakdown() after each step
  std::vector<uint64_t> shard_bytes;      // per parameter: this rank's shard (fp32 bytes)
  std::vector<bool> persistent;           // per parameter: numel <= the persistence threshold
  // The embedding's index, the bytes of one of its rows, and per step the rows its forwards
  // touched (summed over the micro-batches): at one rank an untied embedding is gathered as those
  // rows only, once, for its forward (Note [Rows only] in engine/zero/hooks/zero3_hooks.cc).
  size_t embedding = SIZE_MAX;  // SIZE_MAX: none
  uint64_t embedding_row_bytes = 0;
  std::vector<uint64_t> embedding_rows;
};

// Trains `run` at stage 3 (persistence threshold 200: only the norms persist) on `comm`, each
// rank on its own micro-batches (rank, rank + world, ...).
PrefetchOutcome TrainPrefetch(Communicator& comm, const PrefetchRun& run, const TokenData& data);

std::string Describe(const PrefetchRun& run);

}  // namespace strata::testing
