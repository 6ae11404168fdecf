// `strata train`'s run, shared by cmd_train.cc (the command and the training loop) and
// cmd_train_run.cc (building the run): the command's options, everything a run holds, and Setup,
// which builds it. Private to those two files.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "data/prepare/prepared_sampler.h"
#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/run_memory.h"
#include "models/data/sequence_sampler.h"
#include "models/data/token_file.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"
#include "tools/strata/train/cmd_train_checkpoint.h"
#include "tools/strata/train/cmd_train_setup.h"
#include "tools/strata/train/cmd_train_signal.h"

namespace strata::cli::internal {

struct Options {
  std::string config, model, init, data;
  std::string train_on = "responses", data_cache = DefaultDataCache();
  int64_t seq_len = 64, steps = 10, seed = 1234, vocab_size = 0;
  bool json = false;
  bool packing = true;
  CheckpointFlags ckpt;  // --save, --save-interval, --load, --export
};

// Everything a run holds, in destruction order (engine before model before device).
struct Run {
  int rank = 0, world = 1;
  Config config;
  llama::LlamaConfig model_config;
  TierBudget budget;        // the engine's CPU-tier accounting (current and peak)
  MemoryBaseline mem_base;  // process memory before the run (engine/plan/run_memory.h)
  MemoryPlan plan;          // the per-tier memory plan of this rank
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
  std::optional<data::TokenFile> tokens;
  std::optional<data::SequenceSampler> sampler;
  std::optional<data::PreparedSampler> prepared;  // a JSONL dataset
  TrainIdentity id;                               // for the checkpoint calls
  TrainResume resume;  // where training starts (--load) and the last step saved
  int64_t micro_done = 0;
  std::unique_ptr<PreemptionAgreement> stop;
  int stop_signal = 0;  // the SIGTERM / SIGINT that ended the run early (0: none)
  int64_t stop_step = 0;
  // The pageable tier sampled from the device's creation on (engine/plan/run_memory.h); last, so
  // it stops before the device and the budget go.
  std::unique_ptr<PageableSampler> mem_sampler;
};

// Builds the run; on failure sets *exit_code (2 for invalid input, 1 otherwise).
Status Setup(const Options& o, Run* r, int* exit_code);

}  // namespace strata::cli::internal
