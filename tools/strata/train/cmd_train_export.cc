// strata train's --export without --save (cmd_train_export.h).
#include "tools/strata/train/cmd_train_export.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "nn/io/safetensors.h"

namespace strata::cli {

namespace fs = std::filesystem;

Result<std::string> ExportFromEngine(Engine& engine, nn::CausalLM& model,
                                     const llama::LlamaConfig& config, int rank,
                                     const std::string& out_dir) {
  const std::vector<nn::Parameter*> params = model.NamedParameters();
  std::vector<float> values;
  if (rank != 0) {  // the gathers, in rank 0's order
    for (size_t i = 0; i < params.size(); ++i) {
      values.resize(static_cast<size_t>(params[i]->numel()));
      STRATA_RETURN_IF_ERROR(engine.GatherMasterParameter(i, values));
    }
    return std::string();
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  Status created = ec ? IoError("--export " + out_dir + ": " + ec.message()) : Status::Ok();
  // Every source is read once, in order (WriteSafetensorsCheckpoint streams them): each read is
  // that parameter's gather.
  size_t gathered = 0;
  std::vector<nn::SafetensorsSource> sources;
  for (size_t i = 0; i < params.size(); ++i) {
    nn::SafetensorsSource src;
    src.name = params[i]->name();
    src.dtype = DType::kFloat32;
    for (int d = 0; d < params[i]->shape().ndim(); ++d) src.shape.push_back(params[i]->shape()[d]);
    src.read = [&, i](std::span<std::byte> out) -> Status {
      values.resize(static_cast<size_t>(params[i]->numel()));
      gathered = i + 1;
      STRATA_RETURN_IF_ERROR(engine.GatherMasterParameter(i, values));
      std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
      return Status::Ok();
    };
    sources.push_back(std::move(src));
  }
  Status written =
      created.ok() ? nn::WriteSafetensorsCheckpoint(out_dir, sources, 5'000'000'000) : created;
  // A failed write stops reading; the other ranks still wait in the remaining gathers.
  for (size_t i = gathered; i < params.size(); ++i) {
    values.resize(static_cast<size_t>(params[i]->numel()));
    STRATA_RETURN_IF_ERROR(engine.GatherMasterParameter(i, values));
  }
  STRATA_RETURN_IF_ERROR(written.WithContext("--export " + out_dir));
  nlohmann::json j = llama::LlamaConfigJson(config);
  j["torch_dtype"] = "float32";
  STRATA_RETURN_IF_ERROR(
      WriteFileDurably((fs::path(out_dir) / "config.json").string(), j.dump(2) + "\n"));
  STRATA_RETURN_IF_ERROR(SyncDirectory(out_dir));
  const bool sharded = fs::exists(fs::path(out_dir) / nn::SafetensorsCheckpoint::kIndexFile);
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "exported the trained weights (step %lld, %.2fM params) to %s as fp32: %s",
      static_cast<long long>(engine.applied_steps()),
      static_cast<double>(config.NumParameters()) / 1e6, out_dir.c_str(),
      sharded ? "sharded safetensors + model.safetensors.index.json" : "model.safetensors");
  return std::string(line);
}

}  // namespace strata::cli
