// Where `strata generate` gets a model: a Hugging Face directory (config.json + safetensors) or a
// Strata checkpoint directory (`strata train --save`: `latest` + a tag with its manifest and
// shard files, read in place as `strata export` reads them, without exporting first). Either
// way the result is the model's config and a ParamInitFn giving each parameter's fp32 values by
// its Hugging Face name, which the device placement uploads and the offloaded placements hand
// to the parameter store.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "models/llama/config/llama_config.h"

namespace strata::cli {

struct GenerateWeights {
  llama::LlamaConfig config;
  ParamInitFn init;
  std::string source;  // "Hugging Face directory DIR" or "checkpoint DIR/TAG (step N)"
  // Where the model's tokenizer files may be: the directory, or a checkpoint's tag directory
  // and the checkpoint directory.
  std::vector<std::string> text_dirs;
};

// `tag` (checkpoints only; empty: the one `latest` names). NotFound naming what was looked for
// when `dir` is neither.
Result<GenerateWeights> OpenGenerateWeights(const std::string& dir, const std::string& tag);

}  // namespace strata::cli
