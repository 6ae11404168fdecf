// `strata train`'s building blocks that are not the training loop: parameter initialisation (a
// random preset by seed, or a Hugging Face directory's safetensors), the training text's
// location, and the data-parallel sampling order. Kept apart from cmd_train.cc so the loop reads
// on its own.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/prepare/prepared_sampler.h"
#include "engine/engine.h"
#include "models/data/token_file.h"

namespace strata::cli {

// normal(0, 0.02) per parameter seeded by (seed, parameter index); norm weights 1. The same on
// every rank.
ParamInitFn RandomInit(uint64_t seed);

// Reads each parameter by its Hugging Face name from the safetensors of `model_dir`, converted
// to fp32. NotFound naming the directory if it holds no safetensors.
Result<ParamInitFn> CheckpointInit(const std::string& model_dir);

// The text the project ships (models/data/text/shakespeare.txt), built into strata
// (shipped_text.h): the training data when --data is not given.
Result<data::TokenFile> ShippedText();

// A JSONL dataset for training: tokenized with MODEL_DIR's tokenizer and chat template into the
// prepare cache under `cache_root` (reused while the file, the tokenizer and the options are the
// same; data/prepare/prepare.h), examples longer than seq_len truncated, and opened as
// sequences (packed several to a window when `pack`). Prints one line saying what was prepared or
// reused (when `print`).
Result<data::PreparedSampler> OpenJsonlData(const std::string& jsonl, const std::string& model_dir,
                                            const std::string& cache_root, bool train_on_all,
                                            int64_t seq_len, uint64_t seed, int64_t vocab_size,
                                            bool pack, bool print);
// Where prepared datasets are cached: $XDG_CACHE_HOME/strata/data, else ~/.cache/strata/data.
std::string DefaultDataCache();

// The first sample index of micro-batch `micro_index` on `rank`: ranks take disjoint, interleaved
// blocks of `micro_batch` samples.
inline uint64_t SampleIndex(int64_t micro_index, int rank, int world, int64_t micro_batch) {
  return static_cast<uint64_t>((micro_index * world + rank) * micro_batch);
}

}  // namespace strata::cli
