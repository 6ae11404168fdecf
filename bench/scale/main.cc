// scale: a model whose fp32 optimizer state does not fit this machine's RAM, trained for a few
// steps with its parameters and optimizer state on NVMe (issue #15, "Benchmarks").
//
//   scale [--json] [--dir DIR] [--steps 3] [--seq 16] [--dtype bf16|fp32] [--cpu-budget 16G]
//         [--hidden 2048 --layers 32 --heads 32 --intermediate 5632 --vocab 32000]
//         [--sub-group-size 50000000] [--link-gbps 25] [--threads 2] [--check-disk-only]
//         [--max-live-parameters 100000000] [--reduce-bucket-size 20000000]
//         [--max-in-cpu 50000000]
//         [--param-buffer-size 0] [--param-buffer-count 4] [--opt-buffer-count 2]
//
// The default model is a Llama of 1.78B parameters (TinyLlama's width, 32 layers): 16 B/param of
// model state is 28 GB, more than the 24 GiB of RAM here. Stage 3, offload_optimizer nvme
// (pipelined) and offload_param nvme (pinned CPU when the engine refuses nvme; the output says
// so), batch 1 and a short sequence so a step takes a minute or two, the same batch every step so
// the loss must go down. The CPU tier runs under a TierBudget limited to --cpu-budget (also
// written as strata.pinned_memory_limit), and the process's peak RSS is held against it: on the
// host-emulated device that counts pinned + pageable CPU memory and the device arena (host RAM),
// so the device is sized like a GPU's share (stage3_max_live_parameters, reduce_bucket_size) and
// only max_in_cpu elements of bf16 shards stay in RAM; with the optimizer offloaded the reduced
// gradients go straight to the pinned partition (no device fp32 gradient partition).
//
// Before placing anything it plans the run (engine/plan/memory_plan.h) and checks the swap
// directory's free space (statvfs) against the planned NVMe bytes + 10% + 1 GiB: if short it says
// what it needs and exits 2. Prints per step the loss and the breakdown; at the end the losses,
// peak RSS vs the budget, the NVMe bytes per step measured vs planned. Removes its swap files.
// Exit 0 ok, 1 failed, 2 not enough disk or bad flags.
#include <sys/statvfs.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/overlap/engine_run.h"
#include "core/flags.h"
#include "engine/plan/run_memory.h"

namespace strata::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(int code, const std::string& what) {
  std::fprintf(stderr, "scale: %s\n", what.c_str());
  std::exit(code);
}

struct Options {
  bool json = false, check_disk_only = false;
  std::string dir, dtype = "bf16";
  int64_t steps = 3, seq = 16, threads = 2;
  int64_t hidden = 2048, layers = 32, heads = 32, intermediate = 5632, vocab = 32000;
  int64_t sub_group_size = 50000000;
  // What a GPU's share looks like (DeepSpeed's defaults assume a large GPU and lots of RAM):
  // parameters gathered at once, the reduce bucket, bf16 shards kept in RAM with offload_param
  // nvme, the parameter swap buffers (0: the largest parameter), the optimizer swap buffers.
  int64_t max_live = 100000000, bucket = 20000000, max_in_cpu = 50000000;
  int64_t param_buffer_size = 0, param_buffers = 4, opt_buffers = 2;
  uint64_t cpu_budget = uint64_t{16} << 30;
  double link_gbps = 25.0;
};

double Gib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(uint64_t{1} << 30); }

std::string ConfigJson(const Options& o, const std::string& param_device, const std::string& dir,
                       uint64_t device_bytes) {
  json param = {{"device", param_device}};
  if (param_device == "nvme") {
    param["nvme_path"] = dir;
    param["max_in_cpu"] = o.max_in_cpu;
    param["buffer_count"] = o.param_buffers;
    param["buffer_size"] = o.param_buffer_size;
  }
  json c = {{"train_micro_batch_size_per_gpu", 1},
            {"gradient_accumulation_steps", 1},
            {"gradient_clipping", 1.0},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-4}, {"weight_decay", 0.0}}}}},
            {"zero_optimization",
             {{"stage", 3},
              {"sub_group_size", o.sub_group_size},
              {"reduce_bucket_size", o.bucket},
              {"stage3_prefetch_bucket_size", o.bucket},
              {"stage3_max_live_parameters", o.max_live},
              {"offload_param", param},
              {"offload_optimizer",
               {{"device", "nvme"},
                {"nvme_path", dir},
                {"buffer_count", o.opt_buffers},
                {"pipeline_read", true},
                {"pipeline_write", true}}}}},
            {"strata",
             {{"device_memory", device_bytes},
              {"link_gbps", o.link_gbps},
              {"pinned_memory_limit", o.cpu_budget}}}};
  if (o.dtype == "bf16") c["bf16"] = {{"enabled", true}};
  return c.dump();
}

Result<MemoryPlan> Plan(const Options& o, const llama::LlamaConfig& mc, const std::string& pd,
                        const std::string& dir, uint64_t device_bytes) {
  RunContext run;
  run.world_size = 1;
  run.hidden_size = mc.hidden_size;
  STRATA_ASSIGN_OR_RETURN(Config c,
                          LoadConfigText(ConfigJson(o, pd, dir, device_bytes), "scale", run));
  return PlanLlamaRun(mc, c, o.seq);
}

int Run(Options o) {
  namespace fs = std::filesystem;
  tbb::global_control cap(tbb::global_control::max_allowed_parallelism,
                          static_cast<size_t>(o.threads));
  const MemoryBaseline base = MemoryBaseline::Take();
  llama::LlamaConfig mc;
  mc.hidden_size = o.hidden;
  mc.num_hidden_layers = o.layers;
  mc.num_attention_heads = mc.num_key_value_heads = o.heads;
  mc.intermediate_size = o.intermediate;
  mc.vocab_size = o.vocab;
  if (o.param_buffer_size == 0) {  // one buffer holds the largest parameter
    o.param_buffer_size =
        std::max({o.vocab * o.hidden, o.intermediate * o.hidden, o.hidden * o.hidden});
  }
  const std::string dir = o.dir.empty() ? "scale-swap" : o.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) Die(2, "cannot create the swap directory " + dir + ": " + ec.message());

  // The plan with a device just big enough (activations included), param nvme assumed: the disk
  // check uses the larger of the two placements.
  Result<MemoryPlan> p0 = Plan(o, mc, "nvme", dir, uint64_t{1} << 30);
  if (!p0.ok()) Die(2, "plan: " + p0.status().message());
  const uint64_t device_bytes =
      (p0->bytes(PlanTier::kDevice) * 11 / 10 + (uint64_t{64} << 20)) / 4096 * 4096;
  Result<MemoryPlan> plan = Plan(o, mc, "nvme", dir, device_bytes);
  if (!plan.ok()) Die(2, "plan: " + plan.status().message());
  const uint64_t need = plan->bytes(PlanTier::kNvme) * 11 / 10 + (uint64_t{1} << 30);
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) Die(2, "statvfs " + dir + " failed");
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const bool big = static_cast<double>(mc.NumParameters()) * 16 >
                   static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  char line[512];
  std::snprintf(line, sizeof(line),
                "%lld params (%.1f GiB of model state at 16 B/param; RAM %.1f GiB): needs %.1f GiB "
                "free in %s (planned NVMe %.1f GiB + 10%% + 1 GiB), has %.1f GiB",
                static_cast<long long>(mc.NumParameters()),
                Gib(static_cast<uint64_t>(mc.NumParameters()) * 16),
                Gib(static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                    static_cast<uint64_t>(sysconf(_SC_PAGESIZE))),
                Gib(need), dir.c_str(), Gib(plan->bytes(PlanTier::kNvme)), Gib(free_bytes));
  if (free_bytes < need) Die(2, std::string("not enough disk: ") + line);
  if (!o.json) std::printf("scale: %s\n", line);
  // On the host-emulated device the device arena is process memory: the RAM this run needs is
  // the plan's device + pinned + pageable bytes, all of it counted by the peak RSS.
  const uint64_t planned_ram = plan->bytes(PlanTier::kDevice) + plan->bytes(PlanTier::kPinnedCpu) +
                               plan->bytes(PlanTier::kPageableCpu);
  if (!o.json) {
    std::printf(
        "scale: planned RAM %.2f GiB = device %.2f (emulated: host RAM) + pinned %.2f + pageable "
        "%.2f; budget %.2f GiB%s\n",
        Gib(planned_ram), Gib(plan->bytes(PlanTier::kDevice)),
        Gib(plan->bytes(PlanTier::kPinnedCpu)), Gib(plan->bytes(PlanTier::kPageableCpu)),
        Gib(o.cpu_budget), planned_ram > o.cpu_budget ? " (OVER: the peak RSS will be too)" : "");
    std::fflush(stdout);
  }
  if (o.check_disk_only) return 0;

  TierBudget budget({TierBudget::kUnlimited, o.cpu_budget, TierBudget::kUnlimited});
  EngineRunOptions eo;
  eo.name = "scale";
  eo.model = mc;
  eo.seq_len = o.seq;
  eo.budget = &budget;
  eo.config_json = ConfigJson(o, "nvme", dir, device_bytes);
  std::string param_device = "nvme";
  const auto t_init = Clock::now();
  Result<std::unique_ptr<EngineRun>> rr = EngineRun::Create(eo);
  if (!rr.ok() && rr.status().code() == StatusCode::kUnimplemented) {
    param_device = "cpu (offload_param nvme refused: " + rr.status().message() + ")";
    eo.config_json = ConfigJson(o, "cpu", dir, device_bytes);
    Result<MemoryPlan> pc = Plan(o, mc, "cpu", dir, device_bytes);
    if (pc.ok()) *plan = *pc;
    rr = EngineRun::Create(eo);
  }
  if (!rr.ok()) Die(1, rr.status().ToString());
  std::unique_ptr<EngineRun> run = std::move(rr).value();
  const double init_s = std::chrono::duration<double>(Clock::now() - t_init).count();
  if (!o.json) {
    std::printf("  engine ready in %.1f s (params on %s)\n", init_s, param_device.c_str());
    std::fflush(stdout);
  }

  const std::vector<int32_t> ids = RandomTokens(static_cast<size_t>(o.seq), mc.vocab_size, 5);
  const nn::TokenBatch batch{ids, ids, 1, o.seq};
  std::vector<double> losses, step_s;
  json breakdowns = json::array();
  StepBreakdown last;
  for (int64_t s = 1; s <= o.steps; ++s) {
    Result<EngineStepResult> r = run->Step(batch);
    if (!r.ok()) Die(1, "step " + std::to_string(s) + ": " + r.status().ToString());
    losses.push_back(r->loss);
    step_s.push_back(r->total_s);
    last = r->breakdown;
    breakdowns.push_back(json::parse(last.ToJson()));
    if (!o.json) {
      std::printf("  step %lld loss %.4f %.1f s  rss %.2f GiB\n    %s\n", static_cast<long long>(s),
                  r->loss, r->total_s, Gib(CurrentRssBytes()), last.ToString().c_str());
      std::fflush(stdout);
    }
  }
  const uint64_t peak_rss = PeakRssBytes();
  const TierStats cpu = budget.Stats(Tier::kCpu);
  const StepTraffic planned = run->plan().traffic;
  json out;
  out["params"] = mc.NumParameters();
  out["model"] = {{"hidden", o.hidden}, {"layers", o.layers},
                  {"heads", o.heads},   {"intermediate", o.intermediate},
                  {"vocab", o.vocab},   {"dtype", o.dtype}};
  out["model_state_bytes_16b_per_param"] = static_cast<uint64_t>(mc.NumParameters()) * 16;
  out["model_state_exceeds_ram"] = big;
  out["param_device"] = param_device;
  out["seq"] = o.seq;
  out["init_s"] = init_s;
  out["losses"] = losses;
  out["loss_went_down"] = losses.size() >= 2 && losses.back() < losses.front();
  out["step_s"] = step_s;
  out["peak_rss_bytes"] = peak_rss;
  out["rss_at_start_bytes"] = base.rss_bytes;
  out["cpu_budget_bytes"] = o.cpu_budget;
  out["rss_under_budget"] = peak_rss <= o.cpu_budget;
  out["rss_counts"] =
      "pinned + pageable CPU memory and the emulated device's memory (host RAM on the "
      "host-emulated device)";
  out["planned_ram_bytes"] = planned_ram;
  out["pinned_peak_bytes"] = cpu.peak_bytes;
  out["device_memory_bytes"] = device_bytes;
  out["device_peak_bytes"] = run->device().MemoryStats().peak_bytes;
  out["disk_needed_bytes"] = need;
  out["disk_free_bytes"] = free_bytes;
  out["nvme_read_bytes_per_step"] = last.nvme_read_bytes;
  out["nvme_write_bytes_per_step"] = last.nvme_write_bytes;
  out["planned_nvme_read_bytes_per_step"] = planned.nvme_read_bytes;
  out["planned_nvme_write_bytes_per_step"] = planned.nvme_write_bytes;
  out["nvme_bytes_over_plan"] =
      planned.nvme_read_bytes + planned.nvme_write_bytes > 0
          ? static_cast<double>(last.nvme_read_bytes + last.nvme_write_bytes) /
                static_cast<double>(planned.nvme_read_bytes + planned.nvme_write_bytes)
          : 0.0;
  out["planned_tiers"] = {{"device", run->plan().bytes(PlanTier::kDevice)},
                          {"pinned_cpu", run->plan().bytes(PlanTier::kPinnedCpu)},
                          {"pageable_cpu", run->plan().bytes(PlanTier::kPageableCpu)},
                          {"nvme", run->plan().bytes(PlanTier::kNvme)}};
  out["zero"] = {{"stage3_max_live_parameters", o.max_live},
                 {"reduce_bucket_size", o.bucket},
                 {"stage3_prefetch_bucket_size", o.bucket},
                 {"sub_group_size", o.sub_group_size},
                 {"offload_param.max_in_cpu", o.max_in_cpu},
                 {"offload_param.buffer_count", o.param_buffers},
                 {"offload_param.buffer_size", o.param_buffer_size},
                 {"offload_optimizer.buffer_count", o.opt_buffers}};
  out["breakdowns"] = breakdowns;
  run.reset();
  fs::remove_all(dir, ec);
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "scale: loss %.4f -> %.4f, peak RSS %.2f GiB (pinned + pageable + the emulated device's "
        "memory; planned %.2f; budget %.2f GiB, %s), nvme per step r %.2f GiB w %.2f GiB "
        "(planned r %.2f w %.2f)\n",
        losses.front(), losses.back(), Gib(peak_rss), Gib(planned_ram), Gib(o.cpu_budget),
        peak_rss <= o.cpu_budget ? "under" : "OVER", Gib(last.nvme_read_bytes),
        Gib(last.nvme_write_bytes), Gib(planned.nvme_read_bytes), Gib(planned.nvme_write_bytes));
  }
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using strata::FlagParser;
  strata::bench::Options o;
  FlagParser flags("scale [options]: a few steps of a model whose optimizer state exceeds RAM");
  flags.Bool("json", &o.json, "print one JSON object");
  flags.String("dir", &o.dir, "swap directory (default ./scale-swap; removed at the end)");
  flags.Int("steps", &o.steps, "optimizer steps", 1, 1000);
  flags.Int("seq", &o.seq, "tokens in the (single) sequence", 2, 65536);
  flags.Choice("dtype", &o.dtype, {"bf16", "fp32"}, "parameter (compute) dtype");
  flags.Bytes("cpu-budget", &o.cpu_budget, "CPU memory budget (strata.pinned_memory_limit)");
  flags.Int("hidden", &o.hidden, "hidden size", 8, 65536);
  flags.Int("layers", &o.layers, "decoder layers", 1, 1024);
  flags.Int("heads", &o.heads, "attention heads", 1, 1024);
  flags.Int("intermediate", &o.intermediate, "MLP intermediate size", 8, 1 << 20);
  flags.Int("vocab", &o.vocab, "vocabulary size", 256, 1 << 20);
  flags.Int("sub-group-size", &o.sub_group_size, "zero_optimization.sub_group_size (elements)",
            4096, int64_t{1} << 40);
  flags.Int("max-live-parameters", &o.max_live, "zero_optimization.stage3_max_live_parameters", 1,
            int64_t{1} << 40);
  flags.Int("reduce-bucket-size", &o.bucket,
            "zero_optimization.reduce_bucket_size and stage3_prefetch_bucket_size (elements)", 1,
            int64_t{1} << 40);
  flags.Int("max-in-cpu", &o.max_in_cpu, "offload_param.max_in_cpu (elements kept in RAM)", 0,
            int64_t{1} << 40);
  flags.Int("param-buffer-size", &o.param_buffer_size,
            "offload_param.buffer_size (elements; 0: the largest parameter)", 0, int64_t{1} << 40);
  flags.Int("param-buffer-count", &o.param_buffers, "offload_param.buffer_count", 1, 64);
  flags.Int("opt-buffer-count", &o.opt_buffers, "offload_optimizer.buffer_count", 1, 64);
  flags.Double("link-gbps", &o.link_gbps, "emulated host<->device link, GB/s (0: unpaced)");
  flags.Int("threads", &o.threads, "threads for oneTBB (GEMMs, kernels) and the CPU optimizer", 1,
            256);
  flags.Bool("check-disk-only", &o.check_disk_only, "plan, check the disk, and stop");
  std::vector<std::string> positional;
  strata::Status s = flags.Parse(argc, argv, 1, &positional);
  if (!s.ok()) strata::bench::Die(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) strata::bench::Die(2, "unexpected argument '" + positional[0] + "'");
  return strata::bench::Run(o);
}
