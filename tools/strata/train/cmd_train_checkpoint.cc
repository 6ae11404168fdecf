// strata train's --save / --load / --export (cmd_train_checkpoint.h).
#include "tools/strata/train/cmd_train_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "core/units.h"
#include "engine/checkpoint/checkpoint.h"
#include "tools/strata/cmd_export.h"
#include "tools/strata/train/cmd_train_space.h"

namespace strata::cli {

namespace fs = std::filesystem;

void RegisterCheckpointFlags(FlagParser& flags, CheckpointFlags* f) {
  flags.String("save", &f->save,
               "checkpoint directory: save at the end (and every --save-interval)");
  flags.Int("save-interval", &f->save_interval,
            "also save every N optimizer steps (0: only at the end)", 0);
  flags.String("load", &f->load,
               "resume from a checkpoint directory, or `auto`: from --save's if it has one");
  flags.Int("save-total-limit", &f->save_total_limit,
            "keep only the newest N checkpoints in --save's directory (0: all)", 0);
  flags.String("export", &f->export_dir,
               "after training, export the weights as a Hugging Face directory (from the "
               "final checkpoint with --save, else from the engine's state)");
}

Status ValidateCheckpointFlags(const CheckpointFlags& f) {
  if (f.save.empty()) {
    if (f.save_interval > 0) return InvalidArgumentError("--save-interval needs --save DIR");
    if (f.save_total_limit > 0) return InvalidArgumentError("--save-total-limit needs --save DIR");
    if (f.load == "auto") return InvalidArgumentError("--load auto needs --save DIR");
  }
  return Status::Ok();
}

namespace {

// Note [Save total limit]
// After each save, rank 0 keeps the `limit` newest complete checkpoints of `dir` (by their
// manifests' global step; a tag directory without a manifest is not a checkpoint and is left
// alone) and removes the older ones, except the one `latest` names and the one this run resumed
// from. Each removal deletes the manifest first, so a kill mid-removal leaves a directory that
// is no longer a complete checkpoint rather than a broken one.
Result<std::vector<std::string>> PruneCheckpoints(const std::string& dir, int64_t limit,
                                                  const std::string& resumed_tag) {
  STRATA_ASSIGN_OR_RETURN(const std::string latest, ReadLatestTag(dir));
  std::vector<std::pair<int64_t, std::string>> found;  // (global step, tag)
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string tag = e.path().filename().string();
    if (!e.is_directory() || !ValidateCheckpointTag(tag).ok()) continue;
    if (!fs::exists(e.path() / kCheckpointManifestFile)) continue;
    Result<CheckpointManifest> m = ReadCheckpointManifest(e.path().string());
    if (!m.ok()) continue;  // not ours to judge: left alone
    found.emplace_back(m->global_steps, tag);
  }
  if (ec) return IoError("--save-total-limit: list " + dir + ": " + ec.message());
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> removed;
  for (size_t i = static_cast<size_t>(limit); i < found.size(); ++i) {
    const std::string& tag = found[i].second;
    if (tag == latest || tag == resumed_tag) continue;
    const fs::path path = fs::path(dir) / tag;
    fs::remove(path / kCheckpointManifestFile, ec);
    if (!ec) fs::remove_all(path, ec);
    if (ec) return IoError("--save-total-limit: remove " + path.string() + ": " + ec.message());
    removed.push_back(tag);
  }
  return removed;
}

// A save that failed: rank 0 removes what it wrote (<tag>.partial: never a checkpoint, and on a
// full disk it holds the space), and a full disk is said as such, with the sizes and the way on.
Status ExplainFailedSave(const CheckpointFlags& f, const TrainIdentity& id, const std::string& tag,
                         const Status& s) {
  if (id.rank != 0) return s;
  std::error_code ec;
  fs::remove_all(fs::path(f.save) / (tag + ".partial"), ec);
  if (!IsOutOfSpace(s, f.save, id.checkpoint_bytes)) return s;
  const uint64_t free = FreeBytes(f.save);
  const uint64_t missing = free < id.checkpoint_bytes ? id.checkpoint_bytes - free : 0;
  Result<std::string> latest = ReadLatestTag(f.save);
  const std::string from = latest.ok() ? "from " + *latest + ", which is intact"
                                       : "(there is no earlier checkpoint: it starts over)";
  return Status(StatusCode::kIoError,
                "checkpoint: saving " + tag + " to " + f.save + " ran out of disk space (" +
                    s.message() + "); a checkpoint of this model needs " +
                    FormatBytes(id.checkpoint_bytes) + " and the filesystem has " +
                    FormatBytes(free) + " free: free " +
                    (missing > 0 ? FormatBytes(missing) : std::string("space")) +
                    " there, then run the same command with --load auto to continue " + from,
                ENOSPC);
}

std::string ClientState(const TrainIdentity& id, int64_t step, int64_t micro) {
  nlohmann::json j;
  j["strata_train"] = {{"step", step},
                       {"micro_batches", micro},
                       {"samples", micro * id.world * id.micro_batch},
                       {"world_size", id.world},
                       {"micro_batch", id.micro_batch},
                       {"seed", id.seed}};
  return j.dump();
}

Status Save(const CheckpointFlags& f, const TrainIdentity& id, int64_t step, int64_t micro,
            Engine& engine, TrainResume* resume) {
  if (Status s = engine.SaveCheckpoint(f.save, "", ClientState(id, step, micro)); !s.ok()) {
    return ExplainFailedSave(f, id, DefaultCheckpointTag(engine.stats().global_steps), s);
  }
  resume->last_saved_step = step;
  if (f.save_total_limit > 0 && id.rank == 0) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> removed,
                            PruneCheckpoints(f.save, f.save_total_limit, resume->resumed_tag));
    if (id.print && !removed.empty()) {
      std::string list;
      for (const std::string& t : removed) list += (list.empty() ? "" : ", ") + t;
      std::printf("checkpoint: removed %s (--save-total-limit %lld)\n", list.c_str(),
                  static_cast<long long>(f.save_total_limit));
    }
  }
  if (id.print) {
    std::printf("checkpoint: saved %s to %s\n",
                DefaultCheckpointTag(engine.stats().global_steps).c_str(), f.save.c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

}  // namespace

Status StartCheckpoints(const CheckpointFlags& f, const llama::LlamaConfig& model_config,
                        const TrainIdentity& id, Engine& engine, TrainResume* resume) {
  if (!f.save.empty() && id.rank == 0) {
    std::error_code ec;
    fs::create_directories(f.save, ec);
    if (ec) return IoError("--save " + f.save + ": " + ec.message());
    if (f.model_dir.empty()) {
      STRATA_RETURN_IF_ERROR(WriteFileDurably((fs::path(f.save) / "config.json").string(),
                                              llama::LlamaConfigJson(model_config).dump(2) + "\n"));
    } else {
      // The source's own config.json, byte for byte (rope settings and fields Strata does not
      // read included), and its tokenizer / generation files.
      std::ifstream in(fs::path(f.model_dir) / "config.json", std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      if (!in && !in.eof()) return IoError("--save: read " + f.model_dir + "/config.json failed");
      STRATA_RETURN_IF_ERROR(
          WriteFileDurably((fs::path(f.save) / "config.json").string(), bytes.str()));
      STRATA_RETURN_IF_ERROR(CopyModelCompanionFiles(f.model_dir, f.save).status());
    }
    STRATA_RETURN_IF_ERROR(SyncDirectory(f.save));
  }
  if (f.load.empty()) return Status::Ok();
  std::string dir = f.load;
  if (f.load == "auto") {
    dir = f.save;
    if (!fs::exists(fs::path(dir) / kCheckpointLatestFile)) {
      if (id.print) std::printf("checkpoint: none in %s, starting fresh\n", dir.c_str());
      return Status::Ok();
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::string resumed_tag, ReadLatestTag(dir));
  std::error_code same_ec;
  if (!f.save.empty() &&
      fs::weakly_canonical(dir, same_ec) == fs::weakly_canonical(f.save, same_ec)) {
    resume->resumed_tag = resumed_tag;  // --save-total-limit keeps it
  }
  STRATA_ASSIGN_OR_RETURN(std::string client_text, engine.LoadCheckpoint(dir));
  const nlohmann::json client = nlohmann::json::parse(client_text, nullptr, false);
  const EngineStats& s = engine.stats();
  resume->step = s.global_steps;
  resume->micro = s.micro_steps;
  std::string note;
  if (client.is_object() && client.contains("strata_train")) {
    const nlohmann::json& t = client["strata_train"];
    const int64_t samples = t.value("samples", int64_t{0});
    const int64_t per_micro = id.world * id.micro_batch;
    if (t.value("world_size", 0) == id.world &&
        t.value("micro_batch", int64_t{0}) == id.micro_batch) {
      resume->micro = t.value("micro_batches", resume->micro);
    } else {
      resume->micro = samples / per_micro;
      if (samples % per_micro != 0) {
        note = ", data position rounded down to a whole micro-batch";
      }
    }
    if (t.value("seed", id.seed) != id.seed) note += ", another --seed: a different data order";
  } else {
    note = ", no data position in the checkpoint: data restarts at the micro-batch count";
  }
  if (id.print) {
    std::printf("checkpoint: resumed from %s at step %lld%s\n", dir.c_str(),
                static_cast<long long>(resume->step), note.c_str());
    std::fflush(stdout);
  }
  resume->last_saved_step = resume->step;
  return Status::Ok();
}

Status AfterStepCheckpoint(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                           int64_t micro, Engine& engine, TrainResume* resume) {
  if (f.save.empty() || f.save_interval <= 0 || step % f.save_interval != 0) return Status::Ok();
  return Save(f, id, step, micro, engine, resume);
}

Status FinishCheckpoints(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                         int64_t micro, Engine& engine, TrainResume* resume) {
  if (f.save.empty()) return Status::Ok();
  if (resume->last_saved_step != step || !fs::exists(fs::path(f.save) / kCheckpointLatestFile)) {
    STRATA_RETURN_IF_ERROR(Save(f, id, step, micro, engine, resume));
  }
  if (f.export_dir.empty() || id.rank != 0) return Status::Ok();
  STRATA_ASSIGN_OR_RETURN(std::string line, ExportLlamaCheckpoint(f.save, f.export_dir, {}));
  if (id.print) std::printf("%s\n", line.c_str());
  return Status::Ok();
}

Status StopCheckpoint(const CheckpointFlags& f, const TrainIdentity& id, int64_t step,
                      int64_t micro, Engine& engine, TrainResume* resume) {
  if (f.save.empty() || resume->last_saved_step == step) return Status::Ok();
  return Save(f, id, step, micro, engine, resume);
}

}  // namespace strata::cli
