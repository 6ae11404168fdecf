// `strata export CKPT_DIR OUT_DIR`: DeepSpeed's zero_to_fp32 for Strata checkpoints — the fp32
// master weights of every rank's shard consolidated into a Hugging Face directory that
// transformers' from_pretrained and `strata train --model` load. No engine, ranks or device.
// Exit 0 ok, 1 failed while writing, 2 bad usage or an unusable checkpoint.
#include "tools/strata/cmd_export.h"

#include <cstdio>
#include <filesystem>

#include "core/flags.h"
#include "models/llama/config/llama_config.h"
#include "nn/io/safetensors.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {

namespace fs = std::filesystem;

Result<std::string> ExportLlamaCheckpoint(const std::string& ckpt_dir, const std::string& out_dir,
                                          const CheckpointExportOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::string tag_dir, ResolveCheckpointDir(ckpt_dir, options.tag));
  STRATA_ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(tag_dir));
  const std::string config_dir = fs::exists(fs::path(tag_dir) / "config.json") ? tag_dir : ckpt_dir;
  STRATA_ASSIGN_OR_RETURN(llama::LlamaConfig config, llama::ReadLlamaConfig(config_dir));
  uint64_t total = 0;
  for (const CheckpointParam& p : m.params) total += p.numel;
  if (static_cast<uint64_t>(config.NumParameters()) != total) {
    return InvalidArgumentError("export: " + config_dir + "/config.json describes " +
                                std::to_string(config.NumParameters()) +
                                " parameters but checkpoint " + tag_dir + " holds " +
                                std::to_string(total) + " (not this checkpoint's model)");
  }
  DType written = DType::kFloat32;
  STRATA_RETURN_IF_ERROR(ExportCheckpoint(ckpt_dir, out_dir, options, &written));
  const bool sharded = fs::exists(fs::path(out_dir) / nn::SafetensorsCheckpoint::kIndexFile);
  char line[512];
  std::snprintf(
      line, sizeof(line), "exported %s (step %lld, %.2fM params) to %s as %s: %s", m.tag.c_str(),
      static_cast<long long>(m.global_steps - m.skipped_steps), static_cast<double>(total) / 1e6,
      out_dir.c_str(), std::string(DTypeName(written)).c_str(),
      sharded ? "sharded safetensors + model.safetensors.index.json" : "model.safetensors");
  return std::string(line);
}

namespace {

constexpr const char* kExportUsage =
    "strata export CKPT_DIR OUT_DIR [--tag T] [--dtype fp32|bf16|fp16] [--max-shard-size 5G]\n"
    "  Consolidates a checkpoint (strata train --save) into a Hugging Face directory: the\n"
    "  source model's config.json (torch_dtype = what is written; default the source's dtype),\n"
    "  generation_config.json and tokenizer files when the source had them.";

int ExportFail(int code, const std::string& what) {
  std::fprintf(stderr, "strata export: %s\n", what.c_str());
  return code;
}

int RunExport(const std::vector<std::string>& args) {
  std::string tag, dtype;
  uint64_t max_shard = 5'000'000'000;
  FlagParser flags(kExportUsage);
  flags.String("tag", &tag, "the checkpoint tag (default: the one `latest` names)");
  flags.Choice("dtype", &dtype, {"fp32", "bf16", "fp16"},
               "dtype of the written weights (default: the source config.json's torch_dtype)");
  flags.Bytes("max-shard-size", &max_shard,
              "shard the weights above this size (transformers' max_shard_size)");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return ExportFail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (positional.size() != 2) return ExportFail(2, "expected CKPT_DIR OUT_DIR\n" + flags.Help());
  CheckpointExportOptions o;
  o.tag = tag;
  if (!dtype.empty()) {
    o.dtype = dtype == "bf16"   ? DType::kBFloat16
              : dtype == "fp16" ? DType::kFloat16
                                : DType::kFloat32;
  }
  o.max_shard_bytes = max_shard;
  Result<std::string> r = ExportLlamaCheckpoint(positional[0], positional[1], o);
  if (!r.ok()) {
    const StatusCode c = r.status().code();
    return ExportFail(c == StatusCode::kIoError || c == StatusCode::kInternal ? 1 : 2,
                      r.status().message());
  }
  std::printf("%s\n", r->c_str());
  return 0;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(
    export, "export",
    "consolidate a checkpoint into a Hugging Face directory: `strata export CKPT OUT`",
    strata::cli::RunExport);
