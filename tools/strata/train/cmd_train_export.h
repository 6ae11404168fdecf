// `strata train --export DIR` without --save: the trained weights consolidated from the engine's
// state directly, with no checkpoint written. One parameter at a time, every rank gathering its
// slice of the fp32 master (Engine::GatherMasterParameter: read from wherever the state lives,
// NVMe included, through a buffer of that one parameter) and rank 0 writing it into the Hugging
// Face directory, so the whole model is never in RAM at once - as `strata export` does from a
// checkpoint's shards. With --save, --export consolidates the saved checkpoint instead.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "models/llama/config/llama_config.h"
#include "nn/modules/lm/causal_lm.h"

namespace strata::cli {

// All ranks call it together. Rank 0 writes `out_dir`/model.safetensors (sharded past 5 GB as
// transformers does) and config.json, and returns a one-line summary; other ranks return "".
// With a source `model_dir` (--model), config.json is the source's with every field kept and
// torch_dtype set to what is written (`dtype`, default the source's: bf16 in, bf16 out), and
// the source's generation_config.json and tokenizer files are copied; without one (--init), the
// preset's config.json, whose torch_dtype is the run's compute dtype - as `strata export` of the
// run's checkpoint would write.
Result<std::string> ExportFromEngine(Engine& engine, nn::CausalLM& model,
                                     const llama::LlamaConfig& config, int rank,
                                     const std::string& model_dir, std::optional<DType> dtype,
                                     const std::string& out_dir);

}  // namespace strata::cli
