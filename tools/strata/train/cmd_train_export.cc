// strata train's --export without --save (cmd_train_export.h).
#include "tools/strata/train/cmd_train_export.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "nn/io/safetensors.h"

namespace strata::cli {

namespace fs = std::filesystem;

Result<std::string> ExportFromEngine(Engine& engine, nn::CausalLM& model,
                                     const llama::LlamaConfig& config, int rank,
                                     const std::string& model_dir, std::optional<DType> dtype,
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
  // The source's config.json (every field kept) or the preset's; read before any gather so a bad
  // one fails here - but the other ranks still wait in the gathers below.
  nlohmann::json source_config = llama::LlamaConfigJson(config);
  Status created = Status::Ok();
  if (!model_dir.empty()) {
    std::ifstream in(fs::path(model_dir) / "config.json");
    source_config = nlohmann::json::parse(in, nullptr, false);
    if (!in || source_config.is_discarded() || !source_config.is_object()) {
      created =
          InvalidArgumentError("--export: " + model_dir + "/config.json is not a JSON object");
    }
  }
  DType written_dtype = DType::kFloat32;
  if (created.ok()) {
    Result<DType> d =
        ExportDType(source_config, model_dir.empty() ? "the preset" : model_dir, dtype);
    if (d.ok())
      written_dtype = *d;
    else
      created = d.status();
  }
  std::error_code ec;
  if (created.ok()) fs::create_directories(out_dir, ec);
  if (ec) created = IoError("--export " + out_dir + ": " + ec.message());
  // Every source is read once, in order (WriteSafetensorsCheckpoint streams them): each read is
  // that parameter's gather.
  size_t gathered = 0;
  std::vector<nn::SafetensorsSource> sources;
  for (size_t i = 0; i < params.size(); ++i) {
    nn::SafetensorsSource src;
    src.name = params[i]->name();
    src.dtype = written_dtype;
    for (int d = 0; d < params[i]->shape().ndim(); ++d) src.shape.push_back(params[i]->shape()[d]);
    src.read = [&, i](std::span<std::byte> out) -> Status {
      values.resize(static_cast<size_t>(params[i]->numel()));
      gathered = i + 1;
      STRATA_RETURN_IF_ERROR(engine.GatherMasterParameter(i, values));
      EncodeForExport(values, written_dtype, out);
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
  STRATA_RETURN_IF_ERROR(WriteExportedConfig(std::move(source_config), written_dtype, out_dir));
  if (!model_dir.empty())
    STRATA_RETURN_IF_ERROR(CopyModelCompanionFiles(model_dir, out_dir).status());
  STRATA_RETURN_IF_ERROR(SyncDirectory(out_dir));
  const bool sharded = fs::exists(fs::path(out_dir) / nn::SafetensorsCheckpoint::kIndexFile);
  char line[512];
  std::snprintf(
      line, sizeof(line), "exported the trained weights (step %lld, %.2fM params) to %s as %s: %s",
      static_cast<long long>(engine.applied_steps()),
      static_cast<double>(config.NumParameters()) / 1e6, out_dir.c_str(),
      written_dtype == DType::kFloat32    ? "fp32"
      : written_dtype == DType::kBFloat16 ? "bf16"
                                          : "fp16",
      sharded ? "sharded safetensors + model.safetensors.index.json" : "model.safetensors");
  return std::string(line);
}

}  // namespace strata::cli
