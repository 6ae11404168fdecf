// Config: a DeepSpeed JSON config, resolved into typed sections with DeepSpeed's defaults, plus
// Strata's `strata` section. What the engine, `strata train` and `strata estimate` consume, and
// what `strata config check` shows.
//
//   RunContext run;
//   run.world_size = 8;
//   STRATA_ASSIGN_OR_RETURN(Config config, LoadConfig("ds_config.json", run));
//   // config.zero.stage, config.batch.micro_batch_per_gpu, config.optimizer.lr, ...
//
// Reading follows DeepSpeed (hjson comments and trailing commas, pydantic string coercion, "auto"
// where the Hugging Face integration fills it in, deprecated keys mapped with a warning) and adds
// what DeepSpeed lacks: every misspelt or misplaced key is reported with its JSON path, line,
// column and a "did you mean", all problems of a file at once. docs/config.md lists every key.
#pragma once

#include <string>
#include <string_view>

#include "aio/aio_options.h"
#include "core/status.h"
#include "engine/config/deepspeed/activation_checkpointing_config.h"
#include "engine/config/deepspeed/batch_config.h"
#include "engine/config/deepspeed/optimizer_config.h"
#include "engine/config/deepspeed/precision_config.h"
#include "engine/config/deepspeed/scheduler_config.h"
#include "engine/config/deepspeed/zero_config.h"
#include "engine/config/reader/diagnostics.h"
#include "engine/config/reader/run_context.h"
#include "engine/config/strata/strata_section.h"

namespace strata {

struct Config {
  BatchConfig batch;
  TrainingConfig training;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  ZeroConfig zero;
  ActivationCheckpointingConfig activation_checkpointing;
  AioOptions aio;  // the `aio` section and strata.aio_*
  StrataConfig strata;

  // Every diagnostic (a Config returned by LoadConfig has warnings and notes only) and the
  // origin of each resolved value.
  ConfigReport report;
};

// Checks a config and resolves what it can; never fails: an unreadable or malformed file is an
// error diagnostic in `report`. Use report.ErrorCount() to decide.
Config CheckConfigText(std::string_view text, std::string_view source_name, const RunContext& run);
Config CheckConfigFile(const std::string& path, const RunContext& run);

// For runs: InvalidArgument listing every error (one per line, "file:line:col: error: path:
// message") when the config has any; else the Config (its report holds the warnings).
Result<Config> LoadConfigText(std::string_view text, std::string_view source_name,
                              const RunContext& run);
Result<Config> LoadConfig(const std::string& path, const RunContext& run);

}  // namespace strata
