#include "tools/strata/train/cmd_train_setup.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "models/llama/llama_init.h"
#include "nn/io/safetensors.h"
#include "tools/strata/train/shipped_text.h"

namespace strata::cli {

ParamInitFn RandomInit(uint64_t seed) { return llama::RandomInit(seed); }

Result<ParamInitFn> CheckpointInit(const std::string& model_dir) {
  STRATA_ASSIGN_OR_RETURN(nn::SafetensorsCheckpoint ckpt,
                          nn::SafetensorsCheckpoint::Open(model_dir));
  auto shared = std::make_shared<nn::SafetensorsCheckpoint>(std::move(ckpt));
  return ParamInitFn([shared](const nn::Parameter& p, std::span<float> out) -> Status {
    STRATA_ASSIGN_OR_RETURN(nn::SafetensorView view, shared->Tensor(p.name()));
    std::vector<int64_t> shape;
    for (int i = 0; i < p.shape().ndim(); ++i) shape.push_back(p.shape()[i]);
    return nn::ConvertSafetensor(view, shape, DType::kFloat32, std::as_writable_bytes(out));
  });
}

Result<data::TokenFile> ShippedText() {
  return data::TokenFile::FromText(std::string(kShippedTextName), kShippedText);
}

}  // namespace strata::cli
