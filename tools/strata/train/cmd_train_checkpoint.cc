// strata train's --save / --load / --export (cmd_train_checkpoint.h).
#include "tools/strata/train/cmd_train_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "engine/checkpoint/checkpoint.h"
#include "tools/strata/cmd_export.h"

namespace strata::cli {

namespace fs = std::filesystem;

void RegisterCheckpointFlags(FlagParser& flags, CheckpointFlags* f) {
  flags.String("save", &f->save,
               "checkpoint directory: save at the end (and every --save-interval)");
  flags.Int("save-interval", &f->save_interval,
            "also save every N optimizer steps (0: only at the end)", 0);
  flags.String("load", &f->load,
               "resume from a checkpoint directory, or `auto`: from --save's if it has one");
  flags.String("export", &f->export_dir,
               "after training, export the final checkpoint as a Hugging Face directory");
}

Status ValidateCheckpointFlags(const CheckpointFlags& f) {
  if (f.save.empty()) {
    if (f.save_interval > 0) return InvalidArgumentError("--save-interval needs --save DIR");
    if (!f.export_dir.empty()) {
      return InvalidArgumentError("--export DIR needs --save DIR (it consolidates the checkpoint)");
    }
    if (f.load == "auto") return InvalidArgumentError("--load auto needs --save DIR");
  }
  return Status::Ok();
}

namespace {

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
  STRATA_RETURN_IF_ERROR(engine.SaveCheckpoint(f.save, "", ClientState(id, step, micro)));
  resume->last_saved_step = step;
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
    STRATA_RETURN_IF_ERROR(WriteFileDurably((fs::path(f.save) / "config.json").string(),
                                            llama::LlamaConfigJson(model_config).dump(2) + "\n"));
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

}  // namespace strata::cli
