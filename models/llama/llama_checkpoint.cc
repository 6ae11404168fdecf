#include "models/llama/llama_checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "nn/io/safetensors.h"

namespace strata::llama {
namespace {

constexpr std::string_view kLmHead = "lm_head.weight";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What transformers' LlamaForCausalLM ignores in a checkpoint.
bool Ignorable(std::string_view name, bool tied) {
  return EndsWith(name, ".rotary_emb.inv_freq") || (tied && name == kLmHead);
}

std::vector<int64_t> Dims(const nn::Shape& s) {
  std::vector<int64_t> d(static_cast<size_t>(s.ndim()));
  for (int i = 0; i < s.ndim(); ++i) d[static_cast<size_t>(i)] = s[i];
  return d;
}

// "a, b, c" for at most `max` names, then "... (N in all)".
std::string List(const std::vector<std::string>& names, size_t max = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

// The parameters once each (a tied LM head shares the embedding's Parameter).
std::vector<nn::Parameter*> Unique(const std::vector<nn::Parameter*>& params) {
  std::vector<nn::Parameter*> out;
  std::set<const nn::Parameter*> seen;
  for (nn::Parameter* p : params) {
    if (seen.insert(p).second) out.push_back(p);
  }
  return out;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return ErrnoToStatus(errno, "create " + tmp);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return ErrnoToStatus(ok ? errno : err, "write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename " + tmp + " to " + path);
  }
  return Status::Ok();
}

}  // namespace

Status LoadLlamaWeights(const std::string& dir, const std::vector<nn::Parameter*>& all_params,
                        bool tie_word_embeddings, const Stream& stream,
                        const LlamaLoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(nn::SafetensorsCheckpoint ckpt, nn::SafetensorsCheckpoint::Open(dir));
  const std::vector<nn::Parameter*> params = Unique(all_params);
  std::set<std::string_view> wanted;
  std::vector<std::string> missing;
  for (const nn::Parameter* p : params) {
    wanted.insert(p->name());
    if (!ckpt.Contains(p->name())) missing.push_back(p->name());
  }
  if (!missing.empty()) {
    return NotFoundError("checkpoint " + dir + " lacks " + std::to_string(missing.size()) +
                         " of the model's " + std::to_string(params.size()) +
                         " parameters: " + List(missing));
  }
  if (options.strict) {
    std::vector<std::string> unexpected;
    for (const std::string& name : ckpt.Names()) {
      if (!wanted.count(name) && !Ignorable(name, tie_word_embeddings)) {
        unexpected.push_back(name);
      }
    }
    if (!unexpected.empty()) {
      return InvalidArgumentError("checkpoint " + dir + " holds " +
                                  std::to_string(unexpected.size()) +
                                  " tensors the model does not have (a different architecture "
                                  "or config?): " +
                                  List(unexpected));
    }
  }
  std::vector<std::byte> staging;
  for (const nn::Parameter* p : params) {
    STRATA_ASSIGN_OR_RETURN(nn::SafetensorView t, ckpt.Tensor(p->name()));
    const std::vector<int64_t> shape = Dims(p->shape());
    const std::string where = "load " + ckpt.FileOf(p->name());
    const void* src = t.data.data();
    DType src_dtype = t.dtype;
    const bool aligned = reinterpret_cast<uintptr_t>(src) % DTypeBytes(t.dtype) == 0;
    if (t.shape != shape || !aligned) {
      // Converting checks the shape (naming the tensor) and leaves an aligned copy.
      staging.resize(static_cast<size_t>(p->numel()) * DTypeBytes(p->dtype()));
      Status s = nn::ConvertSafetensor(t, shape, p->dtype(), staging);
      if (!s.ok()) return s.WithContext(where);
      src = staging.data();
      src_dtype = p->dtype();
    }
    Status s = nn::UploadParameter(stream, *p, src, src_dtype, static_cast<size_t>(p->numel()));
    if (!s.ok()) return s.WithContext(where);
  }
  return Status::Ok();
}

Result<std::unique_ptr<LlamaForCausalLM>> LoadLlamaForCausalLM(
    const std::string& dir, Device* device, LlamaModelOptions model_options,
    const LlamaLoadOptions& load_options) {
  STRATA_ASSIGN_OR_RETURN(LlamaConfig config, ReadLlamaConfig(dir));
  model_options.allocate_parameters = true;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LlamaForCausalLM> model,
                          LlamaForCausalLM::Create(config, device, model_options));
  STRATA_ASSIGN_OR_RETURN(Stream stream, device->CreateStream());
  Status s = LoadLlamaWeights(dir, model->NamedParameters(), config.tie_word_embeddings, stream,
                              load_options);
  Status d = device->DestroyStream(stream);
  STRATA_RETURN_IF_ERROR(s);
  STRATA_RETURN_IF_ERROR(d);
  return model;
}

Status SaveLlamaCheckpoint(const std::string& dir, const LlamaConfig& config,
                           const std::vector<nn::Parameter*>& all_params, const Stream& stream,
                           const LlamaSaveOptions& options) {
  LlamaConfig written = config;
  written.torch_dtype = options.dtype.value_or(config.torch_dtype);
  const DType dtype = written.torch_dtype;
  std::vector<nn::SafetensorsSource> sources;
  for (const nn::Parameter* p : Unique(all_params)) {
    // A tied LM head is saved once, as the embedding (transformers drops the duplicate too).
    if (config.tie_word_embeddings && p->name() == kLmHead) continue;
    sources.push_back(
        {p->name(), dtype, Dims(p->shape()), [p, dtype, &stream](std::span<std::byte> out) {
           return nn::DownloadParameter(stream, *p, out.data(), dtype);
         }});
  }
  namespace fs = std::filesystem;
  STRATA_RETURN_IF_ERROR(nn::WriteSafetensorsCheckpoint(dir, sources, options.max_shard_bytes));
  return WriteTextFile((fs::path(dir) / "config.json").string(),
                       LlamaConfigJson(written).dump(2) + "\n")
      .WithContext("checkpoint " + dir);
}

Status SaveLlamaForCausalLM(const std::string& dir, const LlamaForCausalLM& model,
                            const Stream& stream, const LlamaSaveOptions& options) {
  return SaveLlamaCheckpoint(dir, model.config(), model.NamedParameters(), stream, options);
}

}  // namespace strata::llama
