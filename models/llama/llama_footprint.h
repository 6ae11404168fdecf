// A Llama's memory footprint as the engine's memory plan reads it (nn/modules/lm/footprint.h):
// parameter numels in Hugging Face order, the RoPE tables, and the activation buffers
// LlamaForCausalLM allocates for a batch, with and without activation checkpointing. Used by
// `strata train` / `strata estimate` and the benchmarks that plan a Llama run.
#pragma once

#include <cstdint>
#include <string>

#include "models/llama/config/llama_config.h"
#include "nn/modules/lm/footprint.h"

namespace strata::llama {

// The footprint for `micro_batch` sequences of `seq_len` tokens (LlamaForCausalLM::EnsureBuffers,
// allocated as the device arena rounds them). cpu_checkpointing moves the checkpointed layer
// inputs to pinned CPU memory. lm_head_chunk_tokens as LlamaModelOptions takes it (0: whole
// logits; nn::LmHeadLoss::kAutoChunk): the head's logits buffer is one chunk's.
ModelShape LlamaFootprint(const LlamaConfig& config, int64_t micro_batch, int64_t seq_len,
                          bool cpu_checkpointing = false, std::string name = "llama",
                          int64_t lm_head_chunk_tokens = 0);

}  // namespace strata::llama
