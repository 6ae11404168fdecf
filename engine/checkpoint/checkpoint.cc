// Checkpoint names, the manifest's JSON, durable file writes and the commit protocol; the shard
// reader is in checkpoint_reader.cc.
#include "engine/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "nn/io/safetensors.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

namespace fs = std::filesystem;

namespace {

std::atomic<CheckpointCrashHook> g_crash_hook{nullptr};

Status FsError(const std::error_code& ec, const std::string& what) {
  return IoError("checkpoint: " + what + ": " + ec.message());
}

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string CheckpointShardFileName(int rank) {
  return "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_optim_states.safetensors";
}

std::string DefaultCheckpointTag(int64_t global_steps) {
  return "global_step" + std::to_string(global_steps);
}

Status ValidateCheckpointTag(const std::string& tag) {
  const bool bad = tag.empty() || tag == "." || tag == ".." ||
                   tag.find_first_of("/\n\r") != std::string::npos || tag.ends_with(".partial") ||
                   tag.ends_with(".old") || tag == kCheckpointLatestFile;
  if (bad) {
    return InvalidArgumentError("checkpoint tag '" + tag +
                                "': must be a plain directory name (no '/', not '.', '..' or "
                                "'latest', not ending in .partial or .old)");
  }
  return Status::Ok();
}

// ---- Manifest ----

nlohmann::json ManifestToJson(const CheckpointManifest& m) {
  nlohmann::json params = nlohmann::json::array();
  for (const CheckpointParam& p : m.params) {
    params.push_back({{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}});
  }
  return {{"format", "strata-zero-checkpoint"},
          {"format_version", m.format_version},
          {"tag", m.tag},
          {"world_size", m.world_size},
          {"partition_world", m.partition_world},
          {"zero_stage", m.zero_stage},
          {"dtype", m.dtype},
          {"align_numel", m.align_numel},
          {"shard_files", m.partition_world},
          {"params", params},
          {"loss_scaler",
           {{"scale", m.loss_scaler.scale},
            {"iteration", m.loss_scaler.iteration},
            {"last_overflow_iteration", m.loss_scaler.last_overflow_iteration},
            {"hysteresis_left", m.loss_scaler.hysteresis_left}}},
          {"steps",
           {{"micro_steps", m.micro_steps},
            {"global_steps", m.global_steps},
            {"skipped_steps", m.skipped_steps},
            {"last_lr", m.last_lr},
            {"last_grad_norm", m.last_grad_norm}}},
          {"optimizer", {{"kind", m.optimizer}, {"hyperparams", m.hyperparams}}},
          {"client_state", m.client_state}};
}

namespace {

// Reads j[key] (a nested path "a.b") into *out; DataLoss naming the source and path otherwise.
template <typename T>
Status Field(const nlohmann::json& j, const std::string& path, const std::string& source, T* out) {
  const nlohmann::json* cur = &j;
  std::string rest = path;
  while (true) {
    const size_t dot = rest.find('.');
    const std::string key = rest.substr(0, dot);
    if (!cur->is_object() || !cur->contains(key)) {
      return DataLossError("checkpoint manifest " + source + ": field '" + path + "' is missing");
    }
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    rest = rest.substr(dot + 1);
  }
  try {
    *out = cur->get<T>();
  } catch (const nlohmann::json::exception& e) {
    return DataLossError("checkpoint manifest " + source + ": field '" + path +
                         "' has the wrong type (" + cur->dump() + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<CheckpointManifest> ManifestFromJson(const nlohmann::json& j, const std::string& source) {
  CheckpointManifest m;
  STRATA_RETURN_IF_ERROR(Field(j, "format_version", source, &m.format_version));
  if (m.format_version > kCheckpointFormatVersion) {
    return UnimplementedError("checkpoint manifest " + source + ": format_version " +
                              std::to_string(m.format_version) + " is newer than this build's " +
                              std::to_string(kCheckpointFormatVersion));
  }
  STRATA_RETURN_IF_ERROR(Field(j, "tag", source, &m.tag));
  STRATA_RETURN_IF_ERROR(Field(j, "world_size", source, &m.world_size));
  STRATA_RETURN_IF_ERROR(Field(j, "partition_world", source, &m.partition_world));
  STRATA_RETURN_IF_ERROR(Field(j, "zero_stage", source, &m.zero_stage));
  STRATA_RETURN_IF_ERROR(Field(j, "dtype", source, &m.dtype));
  STRATA_RETURN_IF_ERROR(Field(j, "align_numel", source, &m.align_numel));
  if (m.partition_world < 1 || m.world_size < 1 || m.align_numel == 0) {
    return DataLossError("checkpoint manifest " + source +
                         ": world_size, partition_world and align_numel must be >= 1");
  }
  if (!j.contains("params") || !j["params"].is_array()) {
    return DataLossError("checkpoint manifest " + source + ": field 'params' is missing");
  }
  for (size_t i = 0; i < j["params"].size(); ++i) {
    const nlohmann::json& pj = j["params"][i];
    const std::string where = "params[" + std::to_string(i) + "]";
    CheckpointParam p;
    STRATA_RETURN_IF_ERROR(Field(pj, "name", source + " " + where, &p.name));
    STRATA_RETURN_IF_ERROR(Field(pj, "shape", source + " " + where, &p.shape));
    STRATA_RETURN_IF_ERROR(Field(pj, "numel", source + " " + where, &p.numel));
    m.params.push_back(std::move(p));
  }
  STRATA_RETURN_IF_ERROR(Field(j, "loss_scaler.scale", source, &m.loss_scaler.scale));
  STRATA_RETURN_IF_ERROR(Field(j, "loss_scaler.iteration", source, &m.loss_scaler.iteration));
  STRATA_RETURN_IF_ERROR(Field(j, "loss_scaler.last_overflow_iteration", source,
                               &m.loss_scaler.last_overflow_iteration));
  STRATA_RETURN_IF_ERROR(
      Field(j, "loss_scaler.hysteresis_left", source, &m.loss_scaler.hysteresis_left));
  STRATA_RETURN_IF_ERROR(Field(j, "steps.micro_steps", source, &m.micro_steps));
  STRATA_RETURN_IF_ERROR(Field(j, "steps.global_steps", source, &m.global_steps));
  STRATA_RETURN_IF_ERROR(Field(j, "steps.skipped_steps", source, &m.skipped_steps));
  STRATA_RETURN_IF_ERROR(Field(j, "steps.last_lr", source, &m.last_lr));
  STRATA_RETURN_IF_ERROR(Field(j, "steps.last_grad_norm", source, &m.last_grad_norm));
  STRATA_RETURN_IF_ERROR(Field(j, "optimizer.kind", source, &m.optimizer));
  STRATA_RETURN_IF_ERROR(Field(j, "optimizer.hyperparams", source, &m.hyperparams));
  STRATA_RETURN_IF_ERROR(Field(j, "client_state", source, &m.client_state));
  return m;
}

// ---- Files ----

Status WriteFileDurably(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "checkpoint: create " + tmp);
  Status s;
  size_t done = 0;
  while (s.ok() && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s = ErrnoToStatus(n < 0 ? errno : EIO, "checkpoint: write " + tmp);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, "checkpoint: fsync " + tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "checkpoint: close " + tmp);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoToStatus(errno, "checkpoint: rename " + tmp + " to " + path);
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "checkpoint: open directory " + dir);
  Status s;
  if (::fsync(fd) != 0) s = ErrnoToStatus(errno, "checkpoint: fsync directory " + dir);
  ::close(fd);
  return s;
}

Result<std::string> ReadLatestTag(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCheckpointLatestFile).string();
  std::ifstream in(path);
  if (!in)
    return NotFoundError("checkpoint: no " + path + " (no complete checkpoint in " + dir + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string tag = ss.str();
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ' || tag.back() == '\r')) {
    tag.pop_back();
  }
  if (Status s = ValidateCheckpointTag(tag); !s.ok()) {
    return DataLossError("checkpoint: " + path + " does not hold a tag: " + s.message());
  }
  return tag;
}

Result<std::string> ResolveCheckpointDir(const std::string& dir, const std::string& tag) {
  std::string t = tag;
  if (t.empty()) {
    STRATA_ASSIGN_OR_RETURN(t, ReadLatestTag(dir));
  }
  STRATA_RETURN_IF_ERROR(ValidateCheckpointTag(t));
  std::error_code ec;
  const fs::path main = fs::path(dir) / t;
  if (fs::exists(main / kCheckpointManifestFile, ec)) return main.string();
  const fs::path old = fs::path(dir) / (t + ".old");
  if (fs::exists(old / kCheckpointManifestFile, ec)) return old.string();
  return NotFoundError("checkpoint: no " + (main / kCheckpointManifestFile).string() + " (tag '" +
                       t + "' is not a complete checkpoint in " + dir + ")");
}

Result<CheckpointManifest> ReadCheckpointManifest(const std::string& tag_dir) {
  const std::string path = (fs::path(tag_dir) / kCheckpointManifestFile).string();
  std::ifstream in(path);
  if (!in) return NotFoundError("checkpoint: cannot open " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLossError("checkpoint manifest " + path + ": not a JSON object");
  }
  return ManifestFromJson(j, path);
}

Status WriteCheckpointShard(const std::string& tag_dir, const std::string& tag, int rank,
                            const CheckpointShardArrays& arrays) {
  const std::span<const float> parts[3] = {arrays.master, arrays.exp_avg, arrays.exp_avg_sq};
  std::vector<nn::SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata = {
      {"format", "strata-zero-shard"}, {"rank", std::to_string(rank)}, {"tag", tag}};
  for (int i = 0; i < 3; ++i) {
    const std::string name(CheckpointArrayName(static_cast<CheckpointArray>(i)));
    const std::span<const std::byte> bytes = std::as_bytes(parts[i]);
    entries.push_back({name, DType::kFloat32, {static_cast<int64_t>(parts[i].size())}, bytes});
    metadata["xxh3." + name] = Hex(XXH3_64bits(bytes.data(), bytes.size()));
  }
  const std::string path = (fs::path(tag_dir) / CheckpointShardFileName(rank)).string();
  return nn::WriteSafetensors(path, entries, metadata)
      .WithContext("checkpoint shard of rank " + std::to_string(rank));
}

// Note [Checkpoint commit]
// The order that keeps the previous checkpoint loadable whatever instant a SIGKILL (or power
// loss, given the fsyncs) strikes:
//   1. <tag>.partial/ is created empty; every rank writes its shard there (tmp, fsync, rename),
//      rank 0 the manifest; the directory is fsynced. Until step 3 nothing else changed.
//   2. If <tag>/ exists (re-saving a tag) it becomes <tag>.old/ (a stale .old is removed first:
//      a complete <tag>/ makes it redundant).
//   3. <tag>.partial/ is renamed to <tag>/, and <dir> fsynced.
//   4. `latest` is replaced (tmp, fsync, rename, fsync <dir>); <tag>.old/ is removed.
// A crash in 1 leaves a .partial that the next save of that tag removes; between 2 and 3,
// `latest` may name a tag whose only complete copy is <tag>.old/, which ResolveCheckpointDir
// falls back to.

Result<std::string> BeginCheckpoint(const std::string& dir, const std::string& tag) {
  STRATA_RETURN_IF_ERROR(ValidateCheckpointTag(tag));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FsError(ec, "create " + dir);
  const std::string partial = (fs::path(dir) / (tag + ".partial")).string();
  fs::remove_all(partial, ec);
  if (ec) return FsError(ec, "remove stale " + partial);
  fs::create_directory(partial, ec);
  if (ec) return FsError(ec, "create " + partial);
  STRATA_RETURN_IF_ERROR(SyncDirectory(dir));
  return partial;
}

Status CommitCheckpoint(const std::string& dir, const std::string& tag) {
  const fs::path root(dir);
  const fs::path partial = root / (tag + ".partial");
  const fs::path final_dir = root / tag;
  const fs::path old = root / (tag + ".old");
  std::error_code ec;
  STRATA_RETURN_IF_ERROR(SyncDirectory(partial.string()));
  CheckpointCrashPoint("before_rename");
  if (fs::exists(final_dir, ec)) {
    fs::remove_all(old, ec);
    if (ec) return FsError(ec, "remove " + old.string());
    fs::rename(final_dir, old, ec);
    if (ec) return FsError(ec, "rename " + final_dir.string() + " to " + old.string());
    CheckpointCrashPoint("old_moved");
  }
  fs::rename(partial, final_dir, ec);
  if (ec) return FsError(ec, "rename " + partial.string() + " to " + final_dir.string());
  STRATA_RETURN_IF_ERROR(SyncDirectory(dir));
  CheckpointCrashPoint("renamed");
  STRATA_RETURN_IF_ERROR(WriteFileDurably((root / kCheckpointLatestFile).string(), tag + "\n"));
  STRATA_RETURN_IF_ERROR(SyncDirectory(dir));
  CheckpointCrashPoint("latest_written");
  fs::remove_all(old, ec);
  if (ec) return FsError(ec, "remove " + old.string());
  return Status::Ok();
}

void SetCheckpointCrashHookForTesting(CheckpointCrashHook hook) { g_crash_hook.store(hook); }

void CheckpointCrashPoint(std::string_view point) {
  if (CheckpointCrashHook hook = g_crash_hook.load(); hook != nullptr) hook(point);
}

std::string_view CheckpointArrayName(CheckpointArray a) {
  switch (a) {
    case CheckpointArray::kMaster:
      return "master";
    case CheckpointArray::kExpAvg:
      return "exp_avg";
    case CheckpointArray::kExpAvgSq:
      return "exp_avg_sq";
  }
  return "?";
}

}  // namespace strata
