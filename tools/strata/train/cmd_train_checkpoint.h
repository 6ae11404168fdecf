// `strata train`'s checkpoints: --save DIR (at the end and every --save-interval steps),
// --load DIR|auto (resume: parameters, optimizer state, counters and the data position) and
// --export DIR (a Hugging Face directory after training: from the saved checkpoint with --save,
// else from the engine's state, cmd_train_export.h). Kept apart from cmd_train.cc so the
// loop only calls three functions.
//
// The data position travels in the checkpoint's client_state as
// {"strata_train": {"step", "micro_batches", "samples", "world_size", "micro_batch", "seed"}}:
// the sampler's order is a function of (seed, micro-batch index, rank, world), so resuming at
// the saved micro-batch index continues the exact sequence of batches, and the loss sequence
// continues as if uninterrupted. On another world size the position is the samples consumed.
#pragma once

#include <cstdint>
#include <string>

#include "core/flags.h"
#include "core/status.h"
#include "engine/engine.h"
#include "models/llama/config/llama_config.h"

namespace strata::cli {

struct CheckpointFlags {
  std::string save, load, export_dir;
  // The --model directory the run started from ("" for --init): its config.json (every field)
  // and companion files (kModelCompanionFiles) go to --save, so exports keep them.
  std::string model_dir;
  int64_t save_interval = 0;
  int64_t save_total_limit = 0;  // 0: keep every checkpoint
};

// Where training starts (0, 0 for a fresh run) and the last step saved.
struct TrainResume {
  int64_t step = 0;
  int64_t micro = 0;
  int64_t last_saved_step = -1;
  std::string resumed_tag;  // the checkpoint --load read (never removed by --save-total-limit)
};

void RegisterCheckpointFlags(FlagParser& flags, CheckpointFlags* f);
// InvalidArgument naming the flag: --save-interval, --save-total-limit and --load auto need
// --save.
Status ValidateCheckpointFlags(const CheckpointFlags& f);

struct TrainIdentity {
  int rank = 0, world = 1;
  int64_t micro_batch = 1, gas = 1;
  uint64_t seed = 0;
  bool print = false;             // rank 0, not --json: one line per action
  uint64_t checkpoint_bytes = 0;  // one checkpoint's size (cmd_train_space.h), for messages
};

// After the engine is built: writes the model's config.json into --save's directory (rank 0)
// and resumes from --load. Errors from a checkpoint that does not fit (wrong model, corrupt
// shard) are returned as they are.
Status StartCheckpoints(const CheckpointFlags& f, const llama::LlamaConfig& model_config,
                        const TrainIdentity& id, Engine& engine, TrainResume* resume);

// After optimizer step `step` with `micro` micro-batches consumed: saves every --save-interval.
Status AfterStepCheckpoint(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                           int64_t micro, Engine& engine, TrainResume* resume);

// At the end: the final save (unless that step is saved already) and --export (rank 0).
Status FinishCheckpoints(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                         int64_t micro, Engine& engine, TrainResume* resume);

// After a SIGTERM / SIGINT stopped the run after `step`: saves (unless that step is saved
// already) when --save is set; no export.
Status StopCheckpoint(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                      int64_t micro, Engine& engine, TrainResume* resume);

}  // namespace strata::cli
