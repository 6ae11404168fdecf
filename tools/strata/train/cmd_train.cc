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
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/config/auto_sizes.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "offload/tier_budget.h"
#include "tools/strata/subcommand.h"
#include "tools/strata/train/cmd_train_checkpoint.h"
#include "tools/strata/train/cmd_train_export.h"
#include "tools/strata/train/cmd_train_memory.h"
#include "tools/strata/train/cmd_train_run.h"
#include "tools/strata/train/cmd_train_setup.h"
#include "tools/strata/train/cmd_train_signal.h"
#include "tools/strata/train/cmd_train_space.h"

namespace strata::cli {
namespace {

// The run and its setup: cmd_train_run.h.
using internal::Options;
using internal::Run;
using internal::Setup;

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
