// ExportCheckpoint: a checkpoint's fp32 master weights as a Hugging Face weights directory.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/half.h"
#include "engine/checkpoint/checkpoint.h"
#include "nn/io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string_view TorchDTypeName(DType d) {
  return d == DType::kBFloat16 ? "bfloat16" : d == DType::kFloat16 ? "float16" : "float32";
}

// The model's config.json next to the checkpoint, as a JSON object.
Result<nlohmann::json> ReadModelConfig(const std::string& ckpt_dir, const std::string& tag_dir) {
  for (const fs::path& p :
       {fs::path(tag_dir) / "config.json", fs::path(ckpt_dir) / "config.json"}) {
    std::ifstream in(p);
    if (!in) continue;
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgumentError("export: " + p.string() + " is not a JSON object");
    }
    return j;
  }
  return NotFoundError("export: no model config.json in " + tag_dir + " or " + ckpt_dir +
                       " (strata train --save writes it; copy the model's config.json there)");
}

}  // namespace

Status ExportCheckpoint(const std::string& ckpt_dir, const std::string& out_dir,
                        const CheckpointExportOptions& options) {
  STRATA_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(ckpt_dir, options.tag));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json model_config, ReadModelConfig(ckpt_dir, reader.tag_dir()));
  STRATA_RETURN_IF_ERROR(reader.VerifyAll());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return IoError("export: create " + out_dir + ": " + ec.message());

  const CheckpointManifest& m = reader.manifest();
  const DType dtype = options.dtype;
  std::vector<nn::SafetensorsSource> sources;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const CheckpointParam& p = m.params[i];
    nn::SafetensorsSource src;
    src.name = p.name;
    src.dtype = dtype;
    src.shape = p.shape;
    src.read = [&reader, i, dtype, numel = p.numel](std::span<std::byte> out) -> Status {
      std::vector<float> values(numel);
      STRATA_RETURN_IF_ERROR(reader.Read(i, CheckpointArray::kMaster, 0, values));
      if (dtype == DType::kFloat32) {
        std::memcpy(out.data(), values.data(), numel * sizeof(float));
        return Status::Ok();
      }
      for (size_t k = 0; k < numel; ++k) {
        const uint16_t h =
            dtype == DType::kBFloat16 ? FloatToBf16(values[k]) : FloatToFp16(values[k]);
        std::memcpy(out.data() + 2 * k, &h, 2);
      }
      return Status::Ok();
    };
    sources.push_back(std::move(src));
  }
  STRATA_RETURN_IF_ERROR(nn::WriteSafetensorsCheckpoint(out_dir, sources, options.max_shard_bytes)
                             .WithContext("export of " + reader.tag_dir()));
  model_config["torch_dtype"] = TorchDTypeName(dtype);
  const std::string config_path = (fs::path(out_dir) / "config.json").string();
  STRATA_RETURN_IF_ERROR(WriteFileDurably(config_path, model_config.dump(2) + "\n"));
  return SyncDirectory(out_dir);
}

}  // namespace strata
