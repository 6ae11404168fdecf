// `strata train`'s building blocks that are not the training loop: parameter initialisation (a
// random preset by seed, or a Hugging Face directory's safetensors), the training text's
// location, and the data-parallel sampling order. Kept apart from cmd_train.cc so the loop reads
// on its own.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
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

// The first sample index of micro-batch `micro_index` on `rank`: ranks take disjoint, interleaved
// blocks of `micro_batch` samples.
inline uint64_t SampleIndex(int64_t micro_index, int rank, int world, int64_t micro_batch) {
  return static_cast<uint64_t>((micro_index * world + rank) * micro_batch);
}

}  // namespace strata::cli
