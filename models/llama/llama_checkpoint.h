// Hugging Face Llama checkpoints: loading a model directory (config.json + model.safetensors, or
// the shards of model.safetensors.index.json) into a LlamaForCausalLM's parameters, and exporting
// one as a directory that transformers' from_pretrained loads unchanged.
//
// Tensors are matched by Hugging Face name (the model's parameters carry exactly those names) and
// converted between F32 / F16 / BF16 on the way. A tensor the model lacks, a parameter the
// checkpoint lacks and a shape that differs are errors naming the file and the tensor, except
// what transformers itself ignores: rotary `inv_freq` buffers some older checkpoints carry, and
// `lm_head.weight` in a model with tie_word_embeddings.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/stream.h"

namespace strata::llama {

struct LlamaLoadOptions {
  // Tensors in the checkpoint that the model has no parameter for are an error (naming them)
  // unless false, in which case they are skipped.
  bool strict = true;
};

// Loads the weights of the model directory `dir` into `params` (placed parameters named as
// Hugging Face names them), converting dtypes; synchronous on `stream`. `tie_word_embeddings`
// says whether `lm_head.weight` may be absent from `params` and skipped in the file.
Status LoadLlamaWeights(const std::string& dir, const std::vector<nn::Parameter*>& params,
                        bool tie_word_embeddings, const Stream& stream,
                        const LlamaLoadOptions& options = {});

// Reads <dir>/config.json, creates the model on `device` (its parameters allocated, stored in
// options.dtype) and loads the weights.
Result<std::unique_ptr<LlamaForCausalLM>> LoadLlamaForCausalLM(
    const std::string& dir, Device* device, LlamaModelOptions model_options = {},
    const LlamaLoadOptions& load_options = {});

struct LlamaSaveOptions {
  // transformers' default max_shard_size ("5GB"): above it the weights are sharded.
  uint64_t max_shard_bytes = 5'000'000'000;
  // Storage dtype of the files (and config.json's torch_dtype); default: config.torch_dtype.
  std::optional<DType> dtype;
};

// Writes config.json and the weights of `params` to `dir` (created if needed): model.safetensors,
// or shards and the index above max_shard_bytes. Holds one shard in host memory at a time.
Status SaveLlamaCheckpoint(const std::string& dir, const LlamaConfig& config,
                           const std::vector<nn::Parameter*>& params, const Stream& stream,
                           const LlamaSaveOptions& options = {});
// The same for a model's own parameters.
Status SaveLlamaForCausalLM(const std::string& dir, const LlamaForCausalLM& model,
                            const Stream& stream, const LlamaSaveOptions& options = {});

}  // namespace strata::llama
