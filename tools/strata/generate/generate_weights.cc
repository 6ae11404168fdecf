#include "tools/strata/generate/generate_weights.h"

#include <filesystem>
#include <map>
#include <memory>

#include "engine/checkpoint/checkpoint.h"
#include "tools/strata/train/cmd_train_setup.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

bool IsCheckpoint(const std::string& dir) {
  return fs::exists(fs::path(dir) / "latest") || fs::exists(fs::path(dir) / "manifest.json");
}

Result<GenerateWeights> FromCheckpoint(const std::string& dir, const std::string& tag) {
  // A tag directory itself (it holds manifest.json): its parent is the checkpoint directory.
  std::string ckpt_dir = dir, use_tag = tag;
  if (fs::exists(fs::path(dir) / "manifest.json")) {
    const fs::path p = fs::path(dir).lexically_normal();
    const fs::path parent = (p.filename().empty() ? p.parent_path() : p);
    ckpt_dir = parent.parent_path().string();
    if (use_tag.empty()) use_tag = parent.filename().string();
  }
  STRATA_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(ckpt_dir, use_tag));
  const std::string tag_dir = reader.tag_dir();
  const std::string config_dir = fs::exists(fs::path(tag_dir) / "config.json") ? tag_dir : ckpt_dir;
  GenerateWeights w;
  STRATA_ASSIGN_OR_RETURN(w.config, llama::ReadLlamaConfig(config_dir));
  uint64_t total = 0;
  auto names = std::make_shared<std::map<std::string, size_t>>();
  const CheckpointManifest& m = reader.manifest();
  for (size_t i = 0; i < m.params.size(); ++i) {
    total += m.params[i].numel;
    (*names)[m.params[i].name] = i;
  }
  if (static_cast<uint64_t>(w.config.NumParameters()) != total) {
    return InvalidArgumentError(config_dir + "/config.json describes " +
                                std::to_string(w.config.NumParameters()) +
                                " parameters but checkpoint " + tag_dir + " holds " +
                                std::to_string(total) + " (not this checkpoint's model)");
  }
  STRATA_RETURN_IF_ERROR(reader.VerifyAll());
  w.text_dirs = {tag_dir, ckpt_dir};
  w.source =
      "checkpoint " + tag_dir + " (step " + std::to_string(m.global_steps - m.skipped_steps) + ")";
  auto shared = std::make_shared<CheckpointReader>(std::move(reader));
  w.init = [shared, names, tag_dir](const nn::Parameter& p, std::span<float> out) -> Status {
    const auto it = names->find(p.name());
    if (it == names->end()) {
      return NotFoundError("checkpoint " + tag_dir + " has no parameter " + p.name());
    }
    if (shared->manifest().params[it->second].numel != out.size()) {
      return InvalidArgumentError("checkpoint " + tag_dir + ": parameter " + p.name() + " has " +
                                  std::to_string(shared->manifest().params[it->second].numel) +
                                  " elements, the model " + std::to_string(out.size()));
    }
    return shared->Read(it->second, CheckpointArray::kMaster, 0, out);
  };
  return w;
}

}  // namespace

Result<GenerateWeights> OpenGenerateWeights(const std::string& dir, const std::string& tag) {
  if (IsCheckpoint(dir)) return FromCheckpoint(dir, tag);
  if (!fs::exists(fs::path(dir) / "config.json")) {
    return NotFoundError("--model " + dir +
                         ": neither a Hugging Face directory (config.json + safetensors) nor a "
                         "Strata checkpoint (`latest` or manifest.json)");
  }
  if (!tag.empty()) {
    return InvalidArgumentError("--tag " + tag + " names a checkpoint tag, but " + dir +
                                " is a Hugging Face directory");
  }
  GenerateWeights w;
  STRATA_ASSIGN_OR_RETURN(w.config, llama::ReadLlamaConfig(dir));
  STRATA_ASSIGN_OR_RETURN(w.init, CheckpointInit(dir));
  w.source = "Hugging Face directory " + dir;
  w.text_dirs = {dir};
  return w;
}

}  // namespace strata::cli
