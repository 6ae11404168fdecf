// Checkpoint: the on-disk format of an engine checkpoint and its file mechanics, apart from the
// engine so tools (`strata export`) read checkpoints without an engine, a device or ranks.
//
// Layout (DeepSpeed's names where it has one, CONFIG.md "Checkpoint layout"):
//   <dir>/latest                       text: the tag of the newest complete checkpoint
//   <dir>/<tag>/manifest.json          written by rank 0: format version, tag, world size, ZeRO
//                                      stage, dtype, the parameters (names, shapes, numels), the
//                                      partition's alignment, loss scaler, step counters,
//                                      optimizer kind and hyperparameters, the caller's
//                                      client_state (data position, seed)
//   <dir>/<tag>/zero_pp_rank_<r>_mp_rank_00_optim_states.safetensors
//                                      rank r's flat partition (engine/base/partition.h): F32
//                                      tensors master, exp_avg, exp_avg_sq of partition_numel
//                                      elements;
//                                      __metadata__ holds rank, tag and an XXH3-64 checksum per
//                                      tensor. Stage 0 keeps one whole partition: one file.
//
// Crash safety (Note [Checkpoint commit]): every file goes to a temporary name, is fsynced and
// renamed, and its directory fsynced. A save writes into <dir>/<tag>.partial; only when every
// rank's files are durable does rank 0 rename it to <dir>/<tag> and then replace `latest`. A
// SIGKILL at any point therefore leaves `latest` naming the previous checkpoint with its files
// intact. Re-saving an existing tag moves the old directory to <tag>.old first; a reader that
// finds no <tag> but a <tag>.old uses that (the crash fell between the two renames).
//
// Thread safety: free functions are reentrant; a CheckpointReader is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/optim/loss_scaler.h"

namespace strata {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr std::string_view kCheckpointLatestFile = "latest";
inline constexpr std::string_view kCheckpointManifestFile = "manifest.json";

// "zero_pp_rank_<rank>_mp_rank_00_optim_states.safetensors".
std::string CheckpointShardFileName(int rank);
// DeepSpeed's default tag: "global_step<N>".
std::string DefaultCheckpointTag(int64_t global_steps);
// InvalidArgument unless `tag` is a usable directory name (non-empty, no '/', not "." / "..",
// no ".partial" / ".old" suffix, no newline).
Status ValidateCheckpointTag(const std::string& tag);

struct CheckpointParam {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
};

struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  std::string tag;
  int world_size = 1;       // ranks of the run that saved it
  int partition_world = 1;  // shard files: world_size for stages >= 1, 1 for stage 0
  int zero_stage = 0;
  std::string dtype = "fp32";  // compute dtype: fp32, fp16, bf16
  uint64_t align_numel = 64;   // PartitionLayout's alignment
  std::vector<CheckpointParam> params;
  LossScalerState loss_scaler;
  int64_t micro_steps = 0;
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  double last_lr = 0.0;
  double last_grad_norm = 0.0;
  std::string optimizer = "adam";  // OptimizerKindName: adam, adagrad, lion
  nlohmann::json hyperparams = nlohmann::json::object();
  nlohmann::json client_state = nlohmann::json::object();
};

nlohmann::json ManifestToJson(const CheckpointManifest& m);
// DataLoss naming `source` and the field for a manifest that is not one (missing or mistyped
// fields); Unimplemented for a newer format_version.
Result<CheckpointManifest> ManifestFromJson(const nlohmann::json& j, const std::string& source);

// ---- Files ----

// Writes `bytes` to "<path>.tmp", fsyncs, renames to `path`. Does not fsync the directory.
Status WriteFileDurably(const std::string& path, std::string_view bytes);
// fsync of a directory (makes renames and creations in it durable).
Status SyncDirectory(const std::string& dir);
// The tag `<dir>/latest` names. NotFound naming the file if there is none.
Result<std::string> ReadLatestTag(const std::string& dir);
// The directory holding `tag` in `dir` (<dir>/<tag>, or <dir>/<tag>.old as above); an empty tag
// means the one `latest` names. NotFound naming what was looked for.
Result<std::string> ResolveCheckpointDir(const std::string& dir, const std::string& tag);
// Reads and parses <tag_dir>/manifest.json.
Result<CheckpointManifest> ReadCheckpointManifest(const std::string& tag_dir);

// The three arrays of a rank's partition (host memory).
struct CheckpointShardArrays {
  std::span<const float> master, exp_avg, exp_avg_sq;
};
// Writes one rank's shard file into `tag_dir` (durably; the directory is not fsynced).
Status WriteCheckpointShard(const std::string& tag_dir, const std::string& tag, int rank,
                            const CheckpointShardArrays& arrays);

// Save steps of rank 0 (Note [Checkpoint commit]).
// Creates an empty <dir>/<tag>.partial (removing a stale one) and returns its path.
Result<std::string> BeginCheckpoint(const std::string& dir, const std::string& tag);
// Makes <dir>/<tag>.partial the checkpoint <dir>/<tag> and points `latest` at it.
Status CommitCheckpoint(const std::string& dir, const std::string& tag);

// Test-only: called with a name at each step of a save where a crash leaves a distinct state on
// disk ("shard_written", "manifest_written", "before_rename", "renamed", "latest_written"...), so
// a test can SIGKILL the process exactly there. nullptr (the default) disables it.
using CheckpointCrashHook = void (*)(std::string_view point);
void SetCheckpointCrashHookForTesting(CheckpointCrashHook hook);
void CheckpointCrashPoint(std::string_view point);

// ---- Reading the partition back ----

enum class CheckpointArray { kMaster = 0, kExpAvg = 1, kExpAvgSq = 2 };
std::string_view CheckpointArrayName(CheckpointArray a);

// Reads parameters' elements out of a checkpoint's shard files, in any range, whatever world
// size wrote them: the old layouts are recomputed from the manifest (PartitionLayout::Create
// with partition_world and align_numel), and each shard file is opened (mmap) and its checksums
// verified on first use (DataLoss naming the file when one differs).
class CheckpointReader {
 public:
  // `dir` + `tag` as ResolveCheckpointDir takes them.
  static Result<CheckpointReader> Open(const std::string& dir, const std::string& tag);
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const CheckpointManifest& manifest() const { return manifest_; }
  const std::string& tag_dir() const { return tag_dir_; }

  // Elements [begin, begin + out.size()) of parameter `param`'s `array`.
  Status Read(size_t param, CheckpointArray array, size_t begin, std::span<float> out);
  // Opens and verifies every shard file (export does this before writing anything).
  Status VerifyAll();
  // Opens and verifies the shard files holding elements [begin, begin + count) of `param`, so
  // a load can check everything it will read before it changes anything.
  Status VerifyRange(size_t param, size_t begin, size_t count);

 private:
  struct Impl;
  CheckpointReader() = default;
  CheckpointManifest manifest_;
  std::string tag_dir_;
  std::unique_ptr<Impl> impl_;
};

// ---- Consolidation (DeepSpeed's zero_to_fp32) ----

struct CheckpointExportOptions {
  std::string tag;  // empty: the one `latest` names
  // Of the written tensors: fp32, bf16 or fp16; empty: the source config.json's torch_dtype
  // (bf16 in, bf16 out), fp32 when it names none.
  std::optional<DType> dtype;
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default "5GB"
};

// Writes the fp32 master weights of checkpoint `ckpt_dir` as a Hugging Face weights directory in
// `out_dir`: model.safetensors (or shards + model.safetensors.index.json above
// max_shard_bytes), tensors named and shaped as the manifest's parameters, converted to
// options.dtype (round to nearest even); plus config.json copied from <tag dir>/config.json or
// <ckpt_dir>/config.json (what `strata train --save` writes: the source model's own) with every
// field kept and torch_dtype set to the export's dtype, and the source's companion files
// (kModelCompanionFiles) found beside that config.json copied byte for byte. Reads one parameter
// at a time; every shard is verified first (DataLoss naming the file). NotFound naming both
// places if there is no config.json; InvalidArgument if its torch_dtype is not one Strata writes
// and options.dtype is empty. `written` (optional) receives the dtype written.
Status ExportCheckpoint(const std::string& ckpt_dir, const std::string& out_dir,
                        const CheckpointExportOptions& options, DType* written = nullptr);

// The dtype an export writes: `override` when given, else the source config.json's torch_dtype
// (or transformers >= 4.56's "dtype"; bf16 in, bf16 out), fp32 when it names none.
// InvalidArgument naming `config_dir`/config.json and the field if it names a dtype Strata does
// not write.
Result<DType> ExportDType(const nlohmann::json& source_config, const std::string& config_dir,
                          std::optional<DType> override);

// `values` as `dtype` (fp32 bytes, or bf16 / fp16 rounded to nearest even) into `out`, which
// holds values.size() elements of that dtype.
void EncodeForExport(std::span<const float> values, DType dtype, std::span<std::byte> out);

// Writes `out_dir`/config.json: `source_config` with every field kept and torch_dtype (and
// "dtype" when present) set to `written` - what transformers reads back unchanged.
Status WriteExportedConfig(nlohmann::json source_config, DType written, const std::string& out_dir);

// The files of a Hugging Face model directory besides config.json and the weights that a run
// keeps with its checkpoints and exports: generation_config.json and the tokenizer's files.
inline constexpr const char* kModelCompanionFiles[] = {
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model"};
// Copies each of kModelCompanionFiles that `from_dir` has into `to_dir`, byte for byte (written
// durably); the number copied. IoError naming the file.
Result<int> CopyModelCompanionFiles(const std::string& from_dir, const std::string& to_dir);

}  // namespace strata
