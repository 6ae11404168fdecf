// ExportCheckpoint: a checkpoint's fp32 master weights as a Hugging Face weights directory.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "core/half.h"
#include "engine/checkpoint/checkpoint.h"
#include "nn/io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string_view TorchDTypeName(DType d) {
  return d == DType::kBFloat16 ? "bfloat16" : d == DType::kFloat16 ? "float16" : "float32";
}

// The model's config.json next to the checkpoint, as a JSON object; `dir` receives its folder.
Result<nlohmann::json> ReadModelConfig(const std::string& ckpt_dir, const std::string& tag_dir,
                                       std::string* dir) {
  for (const fs::path& p :
       {fs::path(tag_dir) / "config.json", fs::path(ckpt_dir) / "config.json"}) {
    std::ifstream in(p);
    if (!in) continue;
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgumentError("export: " + p.string() + " is not a JSON object");
    }
    *dir = p.parent_path().string();
    return j;
  }
  return NotFoundError("export: no model config.json in " + tag_dir + " or " + ckpt_dir +
                       " (strata train --save writes it; copy the model's config.json there)");
}

}  // namespace

Result<DType> ExportDType(const nlohmann::json& source_config, const std::string& config_dir,
                          std::optional<DType> override) {
  if (override.has_value()) return *override;
  for (const char* key : {"torch_dtype", "dtype"}) {
    const auto it = source_config.find(key);
    if (it == source_config.end() || it->is_null()) continue;
    if (*it == "float32") return DType::kFloat32;
    if (*it == "bfloat16") return DType::kBFloat16;
    if (*it == "float16") return DType::kFloat16;
    return InvalidArgumentError("export: " + config_dir + "/config.json: " + key + " = " +
                                it->dump() +
                                " is not one Strata writes (float32, bfloat16, float16); choose "
                                "one with --dtype fp32|bf16|fp16");
  }
  return DType::kFloat32;
}

void EncodeForExport(std::span<const float> values, DType dtype, std::span<std::byte> out) {
  if (dtype == DType::kFloat32) {
    std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
    return;
  }
  for (size_t k = 0; k < values.size(); ++k) {
    const uint16_t h = dtype == DType::kBFloat16 ? FloatToBf16(values[k]) : FloatToFp16(values[k]);
    std::memcpy(out.data() + 2 * k, &h, 2);
  }
}

Status WriteExportedConfig(nlohmann::json source_config, DType written,
                           const std::string& out_dir) {
  // Every field of the source kept; only the dtype says what is written now.
  source_config["torch_dtype"] = TorchDTypeName(written);
  if (source_config.contains("dtype")) source_config["dtype"] = TorchDTypeName(written);
  return WriteFileDurably((fs::path(out_dir) / "config.json").string(),
                          source_config.dump(2) + "\n");
}

Result<int> CopyModelCompanionFiles(const std::string& from_dir, const std::string& to_dir) {
  int copied = 0;
  for (const char* name : kModelCompanionFiles) {
    const fs::path from = fs::path(from_dir) / name;
    if (!fs::is_regular_file(from)) continue;
    std::ifstream in(from, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (!in && !in.eof()) return IoError("copy " + from.string() + ": read failed");
    STRATA_RETURN_IF_ERROR(WriteFileDurably((fs::path(to_dir) / name).string(), bytes.str()));
    ++copied;
  }
  return copied;
}

Status ExportCheckpoint(const std::string& ckpt_dir, const std::string& out_dir,
                        const CheckpointExportOptions& options, DType* written) {
  STRATA_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(ckpt_dir, options.tag));
  std::string config_dir;
  STRATA_ASSIGN_OR_RETURN(nlohmann::json model_config,
                          ReadModelConfig(ckpt_dir, reader.tag_dir(), &config_dir));
  STRATA_ASSIGN_OR_RETURN(const DType dtype, ExportDType(model_config, config_dir, options.dtype));
  if (written != nullptr) *written = dtype;
  STRATA_RETURN_IF_ERROR(reader.VerifyAll());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return IoError("export: create " + out_dir + ": " + ec.message());

  const CheckpointManifest& m = reader.manifest();
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
      EncodeForExport(values, dtype, out);
      return Status::Ok();
    };
    sources.push_back(std::move(src));
  }
  STRATA_RETURN_IF_ERROR(nn::WriteSafetensorsCheckpoint(out_dir, sources, options.max_shard_bytes)
                             .WithContext("export of " + reader.tag_dir()));
  STRATA_RETURN_IF_ERROR(WriteExportedConfig(std::move(model_config), dtype, out_dir));
  STRATA_RETURN_IF_ERROR(CopyModelCompanionFiles(config_dir, out_dir).status());
  return SyncDirectory(out_dir);
}

}  // namespace strata
