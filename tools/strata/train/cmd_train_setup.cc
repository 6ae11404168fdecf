#include "tools/strata/train/cmd_train_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "data/prepare/prepare.h"
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

std::string DefaultDataCache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/strata/data";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/strata/data";
  return ".strata-cache/data";
}

Result<data::PreparedSampler> OpenJsonlData(const std::string& jsonl, const std::string& model_dir,
                                            const std::string& cache_root, bool train_on_all,
                                            int64_t seq_len, uint64_t seed, int64_t vocab_size,
                                            bool pack, bool print) {
  if (model_dir.empty()) {
    return InvalidArgumentError("--data " + jsonl +
                                ": a JSONL dataset is tokenized with the model's own tokenizer "
                                "and chat template: give --model DIR (with tokenizer.json)");
  }
  data::PrepareOptions o;
  o.tokenize.train_on_prompt = train_on_all;
  o.tokenize.max_tokens = seq_len;
  o.tokenize.overlong = data::Overlong::kTruncate;
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool reused = false;
  data::PrepareSummary summary;
  STRATA_ASSIGN_OR_RETURN(std::string dir,
                          data::PrepareCached(jsonl, model_dir, cache_root, o, &reused, &summary));
  if (print) {
    std::printf("data: %s %s: %s, loss on %s\n", reused ? "reused" : "prepared", dir.c_str(),
                summary.ToString().c_str(), train_on_all ? "every token" : "the responses only");
    std::fflush(stdout);
  }
  STRATA_ASSIGN_OR_RETURN(auto sampler,
                          data::PreparedSampler::Open(dir, seq_len, seed, vocab_size, 0, pack));
  if (print && pack) {
    std::printf("data: %lld examples packed into %lld windows of %lld tokens\n",
                static_cast<long long>(sampler.num_examples()),
                static_cast<long long>(sampler.num_windows()), static_cast<long long>(seq_len));
  }
  return sampler;
}

}  // namespace strata::cli
