// `strata train`: trains a Llama under a DeepSpeed config with the engine — world 1 when started
// directly, one rank per process under `strata launch` or mpirun (each rank drawing its own
// sequences). Reads the config the same way `strata config check` does, so a config that passes
// the check starts. Prints a per-tier memory line, one log line per steps_per_print (a progress
// line on a terminal) and a summary; --json prints one JSON object instead.
// Exit 0 ok, 1 failed while running, 2 bad usage or invalid input (config, preset, data),
// 128 + signal when SIGTERM / SIGINT stopped it at a step boundary (cmd_train_signal.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/comm/launch/launch_env.h"
#include "engine/comm/registry.h"
#include "engine/config/auto_sizes.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "models/data/sequence_sampler.h"
#include "models/data/token_file.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "nn/modules/lm_head_loss.h"
#include "offload/device/registry.h"
#include "offload/tier_budget.h"
#include "tools/strata/subcommand.h"
#include "tools/strata/train/cmd_train_checkpoint.h"
#include "tools/strata/train/cmd_train_export.h"
#include "tools/strata/train/cmd_train_memory.h"
#include "tools/strata/train/cmd_train_setup.h"
#include "tools/strata/train/cmd_train_signal.h"
#include "tools/strata/train/cmd_train_space.h"

namespace strata::cli {
namespace {

constexpr const char* kUsage =
    "strata train --config CFG (--model HF_DIR | --init PRESET) [--data FILE] [--seq-len N]\n"
    "             [--steps N] [--seed S] [--json] [--save DIR [--save-interval N]]\n"
    "             [--save-total-limit N] [--load DIR|auto] [--export DIR]\n"
    "             [--train-on responses|all] [--vocab-size N]\n"
    "  Trains a Llama under a DeepSpeed config (world 1, or the ranks of strata launch/mpirun).\n"
    "  Without --data: the text the project ships, byte-level. A .jsonl --data is tokenized\n"
    "  with --model's tokenizer and chat template (cached), the loss on the responses only.";

// One line on stderr: newlines of multi-error messages become "; ".
int Fail(int code, const std::string& what) {
  std::string line = what;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  std::string out;
  for (char c : line) {
    if (c != '\n') {
      out += c;
    } else {
      out += out.ends_with(':') ? " " : "; ";
    }
  }
  std::fprintf(stderr, "strata train: %s\n", out.c_str());
  return code;
}

std::string DTypeText(DType d) {
  return d == DType::kBFloat16 ? "bf16" : d == DType::kFloat16 ? "fp16" : "fp32";
}

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

struct Options {
  std::string config, model, init, data;
  std::string train_on = "responses", data_cache = DefaultDataCache();
  int64_t seq_len = 64, steps = 10, seed = 1234, vocab_size = 0;
  bool json = false;
  bool packing = true;
  CheckpointFlags ckpt;  // --save, --save-interval, --load, --export
};

// Everything a run holds, in destruction order (engine before model before device).
struct Run {
  int rank = 0, world = 1;
  Config config;
  llama::LlamaConfig model_config;
  TierBudget budget;        // the engine's CPU-tier accounting (current and peak)
  MemoryBaseline mem_base;  // process memory before the run (cmd_train_memory.h)
  MemoryPlan plan;          // the per-tier memory plan of this rank
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
  std::optional<data::TokenFile> tokens;
  std::optional<data::SequenceSampler> sampler;
  std::optional<data::PreparedSampler> prepared;  // a JSONL dataset
  TrainIdentity id;                               // for the checkpoint calls
  TrainResume resume;  // where training starts (--load) and the last step saved
  int64_t micro_done = 0;
  std::unique_ptr<PreemptionAgreement> stop;
  int stop_signal = 0;  // the SIGTERM / SIGINT that ended the run early (0: none)
  int64_t stop_step = 0;
  // The pageable tier sampled from the device's creation on (engine/plan/run_memory.h); last, so
  // it stops before the device and the budget go.
  std::unique_ptr<PageableSampler> mem_sampler;
};

Status OpenTokenData(const Options& o, Run* r);
Status SetupEngine(const Options& o, Run* r, bool launched, int* exit_code);

// Disk space the run needs before it starts: one checkpoint in --save's directory (the ranks'
// shards together; every rank checks it, so that all refuse together rather than some waiting
// in the engine's first collective for one that refused), this rank's plan of swap bytes in the
// nvme_path directories (spread evenly over them, as the swap space stripes), less what swap
// files of a killed run already hold.
std::vector<SpaceNeed> DiskNeeds(const Options& o, const Run& r) {
  std::vector<SpaceNeed> needs;
  if (!o.ckpt.save.empty()) {
    needs.push_back({o.ckpt.save,
                     CheckpointBytes(static_cast<uint64_t>(r.model_config.NumParameters())),
                     "--save"});
  }
  std::vector<std::string> dirs;
  const ZeroConfig& z = r.config.zero;
  for (const auto* paths :
       {z.offload_param.device == OffloadDevice::kNvme ? &z.offload_param.nvme_paths : nullptr,
        z.offload_optimizer.device == OffloadDevice::kNvme ? &z.offload_optimizer.nvme_paths
                                                           : nullptr}) {
    if (paths == nullptr) continue;
    for (const std::string& d : *paths) {
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  }
  for (const std::string& d : dirs) {
    needs.push_back({d, r.plan.bytes(PlanTier::kNvme) / dirs.size(), "nvme_path",
                     ExistingSwapBytes(d, r.rank)});
  }
  return needs;
}

// Builds the run; on failure sets *exit_code (2 for invalid input, 1 otherwise).
Status Setup(const Options& o, Run* r, int* exit_code) {
  *exit_code = 2;
  // The model's shape first: the config's hidden-size-based "auto" keys need it.
  if (!o.init.empty()) {
    STRATA_ASSIGN_OR_RETURN(r->model_config, llama::LlamaPreset(o.init));
    if (o.vocab_size > 0) r->model_config.vocab_size = o.vocab_size;
  } else {
    STRATA_ASSIGN_OR_RETURN(r->model_config, llama::ReadLlamaConfig(o.model));
  }
  STRATA_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  RunContext run;
  run.world_size = env.world_size;
  run.total_num_steps = o.steps;
  run.hidden_size = r->model_config.hidden_size;
  STRATA_ASSIGN_OR_RETURN(r->config, LoadConfig(o.config, run));

  // Data before any memory is placed: a mismatch is the user's to fix.
  STRATA_RETURN_IF_ERROR(llama::CheckSequenceLength(r->model_config, o.seq_len,
                                                    "--seq-len " + std::to_string(o.seq_len)));
  if (o.data.ends_with(".jsonl")) {
    STRATA_ASSIGN_OR_RETURN(
        data::PreparedSampler prepared,
        OpenJsonlData(o.data, o.model, o.data_cache, o.train_on == "all", o.seq_len,
                      static_cast<uint64_t>(o.seed), r->model_config.vocab_size, o.packing,
                      env.rank == 0 && !o.json));
    r->prepared.emplace(std::move(prepared));
  } else {
    STRATA_RETURN_IF_ERROR(OpenTokenData(o, r));
  }
  return SetupEngine(o, r, env.launched(), exit_code);
}

Status OpenTokenData(const Options& o, Run* r) {
  STRATA_ASSIGN_OR_RETURN(data::TokenFile file,
                          o.data.empty() ? ShippedText() : data::TokenFile::Open(o.data));
  r->tokens.emplace(std::move(file));
  const std::string& path = r->tokens->path();
  const int64_t vocab = r->model_config.vocab_size;
  if (r->tokens->format() == data::TokenFormat::kBytes && vocab < 256) {
    return InvalidArgumentError("the model's vocab_size " + std::to_string(vocab) +
                                " is smaller than the byte-level ids (0-255) of text file " + path);
  }
  STRATA_ASSIGN_OR_RETURN(
      data::SequenceSampler sampler,
      data::SequenceSampler::Create(&*r->tokens, o.seq_len, static_cast<uint64_t>(o.seed), vocab,
                                    data::LabelStyle::kHuggingFace));
  r->sampler.emplace(std::move(sampler));
  return Status::Ok();
}

Status SetupEngine(const Options& o, Run* r, bool launched, int* exit_code) {
  const Config& c = r->config;
  *exit_code = 1;
  DeviceOptions dev;
  dev.host.memory_bytes = c.strata.device_memory_bytes;
  dev.host.link_bandwidth_gbps = c.strata.link_gbps;
  dev.host.populate_memory = false;
  // strata.device = cuda runs on the GPU (Unavailable without one); auto stays on the emulated
  // device until the engine reads its optimizer state through OptimizerState::Read/Write.
  if (c.strata.device == DeviceChoice::kCuda) dev.kind = DeviceKind::kCuda;
  STRATA_ASSIGN_OR_RETURN(r->device, CreateDevice(dev));
  r->mem_sampler = std::make_unique<PageableSampler>(*r->device, r->budget, r->mem_base);
  CommOptions co;
  co.device_kind = dev.kind;
  co.backend = c.strata.comm_backend;
  co.timeout_s = c.strata.comm_timeout_s;
  co.log_choice = launched;
  STRATA_ASSIGN_OR_RETURN(r->comm, CreateCommunicator(co));
  r->rank = r->comm->rank();
  r->world = r->comm->world_size();

  llama::LlamaModelOptions mo;
  mo.dtype = c.bf16.enabled ? DType::kBFloat16 : c.fp16.enabled ? DType::kFloat16 : DType::kFloat32;
  mo.allocate_parameters = false;
  mo.allocate_grads = false;
  // A preset has no source dtype: its saved config.json (and so an export's default) says the
  // run's.
  if (!o.init.empty()) r->model_config.torch_dtype = mo.dtype;
  static_assert(StrataConfig::kLmHeadChunkAuto == nn::LmHeadLoss::kAutoChunk);
  mo.lm_head_chunk_tokens = c.strata.lm_head_chunk;
  STRATA_ASSIGN_OR_RETURN(r->model,
                          llama::LlamaForCausalLM::Create(r->model_config, r->device.get(), mo));
  EngineInit init;
  init.budget = &r->budget;
  // A large model's initial values (its NVMe state) take a while: a line every few seconds.
  init.progress = [](const InitProgress& p) {
    std::fprintf(stderr,
                 "strata: writing the initial values: %lld of %lld parameters (%.0f%%), %.0f s\n",
                 static_cast<long long>(p.params_done), static_cast<long long>(p.params_total),
                 100.0 * static_cast<double>(p.elements_done) /
                     static_cast<double>(std::max<uint64_t>(p.elements_total, 1)),
                 p.seconds);
  };
  if (!o.init.empty()) {
    init.init_param = RandomInit(static_cast<uint64_t>(o.seed));
  } else {
    STRATA_ASSIGN_OR_RETURN(init.init_param, CheckpointInit(o.model));
  }
  {
    // "auto" sizing keys that depend on the model, settled before the plan (the engine does the
    // same for itself: its copy comes out equal).
    std::vector<size_t> numels;
    for (const nn::Parameter* p : r->model->NamedParameters()) {
      numels.push_back(static_cast<size_t>(p->numel()));
    }
    ResolveModelAutoSizes(&r->config, numels, c.zero.stage >= 1 ? r->world : 1);
  }
  {
    // strata.cpu_memory: the "auto" sizing keys chosen within it (the engine keeps the choice);
    // the pinned tier is held to what the plan's pageable part leaves of it.
    STRATA_ASSIGN_OR_RETURN(
        BudgetPlan b, PlanTrainRunWithinBudget(r->model_config, c, r->world, r->rank, o.seq_len,
                                               {.save = !o.ckpt.save.empty(),
                                                .export_weights = !o.ckpt.export_dir.empty()}));
    r->config = std::move(b.config);
    r->plan = std::move(b.plan);
    const uint64_t cpu = r->config.strata.cpu_memory_bytes;
    const uint64_t pageable = r->plan.bytes(PlanTier::kPageableCpu);
    if (cpu > 0) r->budget.SetLimit(Tier::kCpu, cpu > pageable ? cpu - pageable : 1);
  }
  STRATA_RETURN_IF_ERROR(CheckTrainRunFits(r->plan, *r->device, r->budget));
  STRATA_RETURN_IF_ERROR(CheckDiskSpace(DiskNeeds(o, *r)));
  STRATA_ASSIGN_OR_RETURN(r->engine,
                          Engine::Initialize(*r->model, r->config, *r->comm, *r->device, init));
  return Status::Ok();
}

struct Totals {
  std::vector<double> losses;
  double seconds = 0;
  int64_t tokens = 0;
  uint64_t peak_cpu = 0;
  bool data_error = false;  // the failure was the data's (exit 2)
};

void PrintStep(const Run& r, const Options& o, int64_t step, double loss, double tok_s,
               double elapsed, bool tty) {
  const EngineStats& s = r.engine->stats();
  if (tty) {
    const double eta = elapsed / static_cast<double>(step) * static_cast<double>(o.steps - step);
    std::printf("\rstep %lld/%lld  loss %.4f  %.0f tok/s  ETA %.0fs   ",
                static_cast<long long>(step), static_cast<long long>(o.steps), loss, tok_s, eta);
    std::fflush(stdout);
    return;
  }
  if (step % r.config.training.steps_per_print != 0 && step != o.steps) return;
  std::printf("step %lld loss %.4f tokens/s %.0f lr %.3g loss_scale %.6g grad_norm %.4f\n",
              static_cast<long long>(step), loss, tok_s, s.last_lr, s.loss_scale, s.last_grad_norm);
  std::printf("  %s\n", r.engine->last_breakdown().ToString().c_str());
  std::fflush(stdout);
}

Status Train(const Options& o, Run& r, Totals* t) {
  const bool print = r.rank == 0 && !o.json;
  const bool tty = isatty(fileno(stdout)) != 0;
  const int64_t mb = r.config.batch.micro_batch_per_gpu;
  const int64_t gas = r.config.batch.gradient_accumulation_steps;
  std::vector<int32_t> ids(static_cast<size_t>(mb * o.seq_len));
  std::vector<int32_t> labels(ids.size());
  // Packed JSONL windows: each token's example (segment) and its position within it.
  const bool packed = r.prepared && r.prepared->packed();
  std::vector<int32_t> positions(packed ? ids.size() : 0), segments(packed ? ids.size() : 0);
  int64_t micro = r.resume.micro;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = r.resume.step + 1; step <= o.steps; ++step) {
    double sum = 0;
    for (int64_t m = 0; m < gas; ++m, ++micro) {
      const uint64_t first = SampleIndex(micro, r.rank, r.world, mb);
      Status next;
      if (r.prepared) {
        r.prepared->set_position(first);
        next = r.prepared->Next(mb, ids, labels, positions, segments);
      } else {
        r.sampler->set_position(first);
        next = r.sampler->Next(mb, ids, labels);
      }
      if (Status s = next; !s.ok()) {
        t->data_error = true;
        return s;
      }
      nn::TokenBatch batch{ids, labels, mb, o.seq_len};
      batch.position_ids = positions;
      batch.segment_ids = segments;
      STRATA_RETURN_IF_ERROR(r.engine->Forward(batch));
      STRATA_ASSIGN_OR_RETURN(float loss, r.engine->Loss());
      sum += loss;
      STRATA_RETURN_IF_ERROR(r.engine->Backward());
      STRATA_RETURN_IF_ERROR(r.engine->Step());
    }
    t->losses.push_back(sum / static_cast<double>(gas));
    r.micro_done = micro;
    STRATA_RETURN_IF_ERROR(AfterStepCheckpoint(o.ckpt, r.id, step, micro, *r.engine, &r.resume));
    t->tokens += mb * gas * o.seq_len * r.world;
    t->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (print) {
      PrintStep(r, o, step, t->losses.back(), static_cast<double>(t->tokens) / t->seconds,
                t->seconds, tty);
    }
    // A SIGTERM / SIGINT on any rank: every rank stops after this same step.
    STRATA_ASSIGN_OR_RETURN(r.stop_signal, r.stop->Agree());
    if (r.stop_signal != 0) {
      r.stop_step = step;
      break;
    }
  }
  if (print && tty) std::printf("\n");
  return r.engine->FlushTrace();
}

int RunTrain(const std::vector<std::string>& args) {
  Options o;
  FlagParser flags(kUsage);
  flags.String("config", &o.config, "the DeepSpeed JSON config");
  flags.String("deepspeed_config", &o.config, "the same as --config (DeepSpeed's spelling)");
  flags.String("model", &o.model, "a Hugging Face Llama directory to start from");
  flags.String(
      "init", &o.init,
      "random initialisation of a preset: tiny, small, 1b, 7b, qwen2.5-0.5b, qwen3-0.6b, qwen3-4b");
  flags.String("data", &o.data,
               "token file (llm.c/nanoGPT .bin), text file (bytes), or a .jsonl dataset "
               "(text, Alpaca, OpenAI messages, ShareGPT) tokenized with --model's tokenizer");
  flags.Choice("train-on", &o.train_on, {"responses", "all"},
               "with a .jsonl: the loss on the assistant's turns (responses) or every token");
  flags.Bool("packing", &o.packing,
             "with a .jsonl: pack several examples into a window (attention kept inside each)");
  flags.String("data-cache", &o.data_cache, "where a .jsonl is prepared once and reused");
  flags.Int("vocab-size", &o.vocab_size, "with --init: the vocabulary size (0: the preset's)", 0);
  flags.Int("seq-len", &o.seq_len, "tokens per sequence", 1);
  flags.Int("steps", &o.steps, "optimizer steps", 1);
  flags.Int("seed", &o.seed, "seed of the random init and of the data order", 0);
  flags.Bool("json", &o.json, "print one JSON object with the losses and figures");
  RegisterCheckpointFlags(flags, &o.ckpt);
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return Fail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) return Fail(2, "unexpected argument '" + positional[0] + "'");
  if (o.config.empty()) return Fail(2, "--config CFG is required");
  if (o.model.empty() == o.init.empty()) {
    return Fail(2, "give exactly one of --model HF_DIR or --init PRESET (tiny, small, 1b, 7b)");
  }
  if (Status s = ValidateCheckpointFlags(o.ckpt); !s.ok()) return Fail(2, s.message());
  if (o.vocab_size > 0 && o.init.empty()) return Fail(2, "--vocab-size goes with --init PRESET");
  o.ckpt.model_dir = o.init.empty() ? o.model : "";

  InstallPreemptionHandlers();
  Run r;
  KeepLargeBlocksMapped();
  r.mem_base = MemoryBaseline::Take();
  int code = 1;
  if (Status s = Setup(o, &r, &code); !s.ok()) return Fail(code, s.message());
  r.id.rank = r.rank;
  r.id.world = r.world;
  r.id.micro_batch = r.config.batch.micro_batch_per_gpu;
  r.id.gas = r.config.batch.gradient_accumulation_steps;
  r.id.seed = static_cast<uint64_t>(o.seed);
  r.id.print = r.rank == 0 && !o.json;
  r.id.checkpoint_bytes = CheckpointBytes(static_cast<uint64_t>(r.model_config.NumParameters()));
  if (Status s = StartCheckpoints(o.ckpt, r.model_config, r.id, *r.engine, &r.resume); !s.ok()) {
    const bool input = s.code() == StatusCode::kInvalidArgument ||
                       s.code() == StatusCode::kNotFound || s.code() == StatusCode::kDataLoss;
    return Fail(input ? 2 : 1, s.message());
  }
  r.micro_done = r.resume.micro;
  if (auto stop = PreemptionAgreement::Create(*r.device, *r.comm); stop.ok()) {
    r.stop = std::move(stop).value();
  } else {
    return Fail(1, stop.status().message());
  }
  const Config& c = r.config;
  const std::string dtype = DTypeText(r.engine->compute_dtype());
  const std::string offload(OffloadDeviceName(c.zero.offload_optimizer.device));
  if (r.rank == 0 && !o.json) {
    std::printf(
        "train: %s %lld params, ZeRO-%lld offload_optimizer %s %s, world %d, micro batch %lld x "
        "gas %lld x seq %lld\n",
        o.init.empty() ? o.model.c_str() : o.init.c_str(),
        static_cast<long long>(r.model_config.NumParameters()),
        static_cast<long long>(c.zero.stage), offload.c_str(), dtype.c_str(), r.world,
        static_cast<long long>(c.batch.micro_batch_per_gpu),
        static_cast<long long>(c.batch.gradient_accumulation_steps),
        static_cast<long long>(o.seq_len));
    if (const std::string autos = AutoSizesText(r.engine->config()); !autos.empty()) {
      std::printf("config: sizes written \"auto\", the planner's choice:\n%s", autos.c_str());
    }
    std::printf("%s", TrainMemoryStartText(r.plan, RunCapacities(*r.device, r.budget)).c_str());
    std::fflush(stdout);
  }
  Totals t;
  if (Status s = Train(o, r, &t); !s.ok()) return Fail(t.data_error ? 2 : 1, s.message());
  if (r.stop_signal != 0) {
    if (Status s = StopCheckpoint(o.ckpt, r.id, r.stop_step, r.micro_done, *r.engine, &r.resume);
        !s.ok()) {
      return Fail(1, s.message());
    }
    if (r.rank == 0) {
      std::fprintf(stderr, "strata train: stopped by %s after step %lld of %lld; %s\n",
                   strsignal(r.stop_signal), static_cast<long long>(r.stop_step),
                   static_cast<long long>(o.steps),
                   o.ckpt.save.empty() ? "nothing saved (no --save DIR)"
                                       : ("saved to " + o.ckpt.save +
                                          "; run the same command with --load auto to continue")
                                             .c_str());
    }
  } else if (Status s = FinishCheckpoints(o.ckpt, r.id, std::max(o.steps, r.resume.step),
                                          r.micro_done, *r.engine, &r.resume);
             !s.ok()) {
    return Fail(1, s.message());
  } else if (!o.ckpt.export_dir.empty() && o.ckpt.save.empty()) {
    Result<std::string> line = ExportFromEngine(*r.engine, *r.model, r.model_config, r.rank,
                                                o.ckpt.model_dir, std::nullopt, o.ckpt.export_dir);
    if (!line.ok()) return Fail(1, line.status().message());
    if (r.id.print) std::printf("%s\n", line->c_str());
  }
  const int exit_code = r.stop_signal != 0 ? PreemptedExitCode(r.stop_signal) : 0;
  if (t.losses.empty()) {  // resumed at or past --steps
    const long long at = static_cast<long long>(r.resume.step);
    if (r.rank == 0 && !o.json) std::printf("done: nothing to train (already at step %lld)\n", at);
    if (r.rank == 0 && o.json) std::printf("{\"losses\": [], \"steps\": %lld}\n", at);
    return exit_code;
  }
  if (r.rank != 0) return exit_code;
  const EngineStats& s = r.engine->stats();
  const uint64_t peak_device = r.device->MemoryStats().peak_bytes;
  t.peak_cpu = r.budget.Stats(Tier::kCpu).peak_bytes;
  const double tok_s = t.seconds > 0 ? static_cast<double>(t.tokens) / t.seconds : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["losses"] = t.losses;
    j["tokens_per_s"] = tok_s;
    j["steps"] = s.global_steps;
    j["skipped_steps"] = s.skipped_steps;
    AddMemoryJson(r.plan, MeasuredPeaks(*r.device, r.budget, r.mem_base, r.mem_sampler.get()), &j);
    j["config"] = {{"stage", c.zero.stage}, {"offload_optimizer", offload}, {"dtype", dtype}};
    j["last_step_breakdown"] = nlohmann::json::parse(r.engine->last_breakdown().ToJson());
    if (r.stop_signal != 0) j["stopped_by_signal"] = r.stop_signal;
    std::printf("%s\n", j.dump().c_str());
    return exit_code;
  }
  std::printf(
      "done: %lld steps (%lld skipped), loss %.4f -> %.4f, %.0f tokens/s, %.1f s, peak device "
      "%s, cpu %s\n",
      static_cast<long long>(s.global_steps), static_cast<long long>(s.skipped_steps),
      t.losses.front(), t.losses.back(), tok_s, t.seconds, Mib(peak_device).c_str(),
      Mib(t.peak_cpu).c_str());
  std::printf("%s", TrainMemoryEndText(
                        r.plan, MeasuredPeaks(*r.device, r.budget, r.mem_base, r.mem_sampler.get()))
                        .c_str());
  return exit_code;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(train, "train",
                  "train a Llama under a DeepSpeed config: `strata train --config CFG --init tiny`",
                  strata::cli::RunTrain);
