// scale: one CPU budget, three model sizes (issue 36, "Benchmarks"): about 1B, 2B and the largest
// whose NVMe state this disk holds, each trained a few steps with its parameters and optimizer
// state on NVMe in a child process of its own (so each peak RSS is that size's).
//
//   scale [--json] [--quick] [--cpu-budget 6G] [--sizes 1b,2b,max] [--dir DIR] [--steps 3]
//         [--seq 16] [--max-layers N] [--estimate-only] [engine knobs, see --help]
//
// Before running it checks the disk (statvfs) against the plan's NVMe bytes per size and says
// what each needs; the largest size is the most layers (at TinyLlama's width) whose planned NVMe
// state fits the free space less 10% and 1 GiB, and the output says whether that state is >= 2x
// this machine's RAM. It also prints how long the whole run should take (the NVMe traffic at the
// speed Strata's aio reaches on a probe file here). Per size: the losses, peak RSS against the
// budget, the steady step time against its honest bound (Note [Scale bound] in size_run.cc).
// Targets: peak RSS flat across sizes (largest / smallest <= 1.15) and under the budget; step
// <= 1.3x the bound at the largest size. --json: rss_largest_over_smallest, peak_rss_over_budget,
// step_over_bound, each size's bound and how it was formed. --quick: tiny sizes (the CI test).
// Exit 0 when every size ran (targets met or not: the ratios say), 1 a size failed, 2 bad flags
// or not enough disk for a size (checked for every size before any runs; --estimate-only says
// which sizes do not fit and exits 0).
#include <sys/statvfs.h>
#include <tbb/global_control.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/overlap/bound_parts.h"
#include "bench/overlap/engine_run.h"
#include "bench/scale/size_run.h"
#include "core/flags.h"
#include "engine/plan/run_memory.h"

namespace strata::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void Die(int code, const std::string& what) {
  std::fprintf(stderr, "scale: %s\n", what.c_str());
  std::exit(code);
}

double Gib(double b) { return b / static_cast<double>(uint64_t{1} << 30); }

struct Args {
  ScaleOptions o;
  bool json = false, quick = false, estimate_only = false;
  std::string sizes = "1b,2b,max";
  int64_t max_layers = 0, child_layers = 0;
  uint64_t disk_free = 0;  // --disk-free: plan for this many free bytes instead of the dir's
};

// The planned NVMe bytes of `layers` layers (the disk check's measure).
uint64_t PlannedNvme(const Args& a, int64_t layers) {
  const llama::LlamaConfig mc = ScaleModel(layers, a.quick);
  RunContext rc;
  rc.hidden_size = mc.hidden_size;
  Result<Config> c = LoadConfigText(ScaleConfigJson(a.o, a.o.dir, uint64_t{1} << 40), "scale", rc);
  if (!c.ok()) Die(2, c.status().message());
  Result<MemoryPlan> p = PlanLlamaRun(mc, *c, a.o.seq);
  if (!p.ok()) Die(2, "plan: " + p.status().message());
  return p->bytes(PlanTier::kNvme);
}

StepTraffic PlannedTraffic(const Args& a, int64_t layers) {
  const llama::LlamaConfig mc = ScaleModel(layers, a.quick);
  RunContext rc;
  rc.hidden_size = mc.hidden_size;
  Result<Config> c = LoadConfigText(ScaleConfigJson(a.o, a.o.dir, uint64_t{1} << 40), "scale", rc);
  Result<MemoryPlan> p = c.ok() ? PlanLlamaRun(mc, *c, a.o.seq) : Result<MemoryPlan>(c.status());
  return p.ok() ? p->traffic : StepTraffic{};
}

// Runs this program again for one size and returns the JSON its last stdout line holds.
json RunChild(const Args& a, int64_t layers, const std::string& dir) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) Die(1, "cannot find this program (/proc/self/exe)");
  self[n] = 0;
  std::string cmd =
      std::string("'") + self + "' --child-layers " + std::to_string(layers) + " --dir '" + dir +
      "' --cpu-budget " + std::to_string(a.o.cpu_budget) + " --steps " + std::to_string(a.o.steps) +
      " --seq " + std::to_string(a.o.seq) + " --dtype " + a.o.dtype + " --threads " +
      std::to_string(a.o.threads) + " --sub-group-size " + std::to_string(a.o.sub_group_size) +
      " --max-live-parameters " + std::to_string(a.o.max_live) + " --reduce-bucket-size " +
      std::to_string(a.o.bucket) + " --max-in-cpu " + std::to_string(a.o.max_in_cpu) +
      " --param-buffer-count " + std::to_string(a.o.param_buffers) + " --opt-buffer-count " +
      std::to_string(a.o.opt_buffers) + " --sweep-bytes " + std::to_string(a.o.sweep_bytes) +
      (a.o.trace.empty() ? ""
                         : " --trace '" + a.o.trace + "." + std::to_string(layers) + ".json'") +
      (a.quick ? " --quick" : "");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) Die(1, "cannot start " + cmd);
  std::string text, last;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p) != nullptr) text += buf;
  const int rc = pclose(p);
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    if (text[pos] == '{') last = text.substr(pos, end - pos);
    pos = end + 1;
  }
  if (last.empty())
    return {{"error", "the child printed no result (exit " + std::to_string(rc) + ")"}};
  return json::parse(last);
}

// GB/s Strata's aio reaches on a 256 MiB probe file here (for the run-time estimate).
AioSpeed Probe(const std::string& dir) {
  const std::string probe = (fs::path(dir) / "probe").string();
  fs::create_directories(probe);
  {
    std::ofstream f(probe + "/probe.bin", std::ios::binary);
    std::vector<char> mib(1 << 20, 1);
    for (int i = 0; i < 256; ++i) f.write(mib.data(), static_cast<std::streamsize>(mib.size()));
  }
  Result<AioSpeed> s = MeasureAioSweep(probe, AioOptions{}, size_t{1} << 24, uint64_t{256} << 20);
  std::error_code ec;
  fs::remove_all(probe, ec);
  if (!s.ok()) Die(1, "aio probe: " + s.status().ToString());
  return *s;
}

int Run(Args a) {
  ScaleOptions& o = a.o;
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) Die(2, "cannot create the swap directory " + o.dir + ": " + ec.message());
  {  // one buffer holds the largest parameter (the embedding or the head at this width)
    const llama::LlamaConfig mc = ScaleModel(1, a.quick);
    o.param_buffer_size =
        std::max(mc.vocab_size * mc.hidden_size, mc.intermediate_size * mc.hidden_size);
  }
  if (a.child_layers > 0) {   // one size, this process (the parent reads the last line)
    KeepLargeBlocksMapped();  // as `strata train` runs the engine (engine/plan/run_memory.h)
    tbb::global_control cap(tbb::global_control::max_allowed_parallelism,
                            static_cast<size_t>(o.threads));
    std::printf("%s\n", RunScaleSize(o, ScaleModel(a.child_layers, a.quick), o.dir).dump().c_str());
    return 0;
  }
  struct statvfs vfs {};
  if (statvfs(o.dir.c_str(), &vfs) != 0) Die(2, "statvfs " + o.dir + " failed");
  const double dir_free = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  // --disk-free: an estimate may plan for another disk; a run never for more than this one has.
  const double free_bytes = a.disk_free == 0 ? dir_free
                            : a.estimate_only
                                ? static_cast<double>(a.disk_free)
                                : std::min(dir_free, static_cast<double>(a.disk_free));
  const double ram =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  // Planned NVMe bytes are affine in the layers (identical layers).
  const double n1 = static_cast<double>(PlannedNvme(a, 1));
  const double per_layer = static_cast<double>(PlannedNvme(a, 2)) - n1;
  // What a size may plan so that its need (planned NVMe + 10% + 1 GiB, below) fits.
  const double usable = (free_bytes - static_cast<double>(uint64_t{1} << 30)) / 1.1;
  int64_t max_layers = per_layer > 0 ? static_cast<int64_t>((usable - n1) / per_layer) + 1 : 0;
  if (a.max_layers > 0) max_layers = std::min(max_layers, a.max_layers);
  // Not exactly affine (alignment, sub-group ends): step down until the plan's need fits.
  while (!a.quick && max_layers > 1 &&
         static_cast<double>(PlannedNvme(a, max_layers)) * 1.1 +
                 static_cast<double>(uint64_t{1} << 30) >
             free_bytes) {
    --max_layers;
  }
  const int64_t small = a.quick ? 2 : 22, mid = a.quick ? 4 : 44;
  const double two_ram_layers = (2 * ram - n1) / per_layer + 1;
  std::vector<std::pair<std::string, int64_t>> sizes;
  for (size_t pos = 0; pos < a.sizes.size();) {
    const size_t end = std::min(a.sizes.find(',', pos), a.sizes.size());
    const std::string s = a.sizes.substr(pos, end - pos);
    pos = end + 1;
    if (s == "1b") {
      sizes.emplace_back(s, small);
    } else if (s == "2b") {
      sizes.emplace_back(s, mid);
    } else if (s == "max") {
      sizes.emplace_back(s, a.quick ? 8 : max_layers);
    } else {
      Die(2, "--sizes: '" + s + "' is not a size; sizes are 1b, 2b, max");
    }
  }
  json plan = json::array();
  char line[512];
  std::snprintf(line, sizeof(line),
                "disk %s: %.1f GiB free; RAM %.1f GiB; planned NVMe state %.2f GiB + %.3f GiB per "
                "layer: the largest size this disk holds is %lld layers; 2x RAM needs >= %.0f "
                "layers",
                o.dir.c_str(), Gib(free_bytes), Gib(ram), Gib(n1 - per_layer), Gib(per_layer),
                static_cast<long long>(max_layers), two_ram_layers);
  if (!a.json) std::printf("scale: %s\n", line);
  const AioSpeed probe = Probe(o.dir);
  double estimate_s = 0, estimate_fit_s = 0;  // every size; the sizes the disk holds
  std::string fit, misfit;  // the sizes the disk holds, and what those it does not would need
  double most_needed = 0;
  for (const auto& [name, layers] : sizes) {
    const double state = static_cast<double>(PlannedNvme(a, layers));
    const StepTraffic t = PlannedTraffic(a, layers);
    const double need = state * 1.1 + static_cast<double>(uint64_t{1} << 30);
    // Writing the initial state, the steps' traffic and one more step's (the mixed pass), the
    // bound's sweep (read + write).
    const double est =
        state / (probe.write_gbps * 1e9) +
        static_cast<double>(o.steps + 1) *
            (static_cast<double>(t.nvme_read_bytes) / (probe.read_gbps * 1e9) +
             static_cast<double>(t.nvme_write_bytes) / (probe.write_gbps * 1e9)) +
        static_cast<double>(o.sweep_bytes) * (1 / probe.read_gbps + 1 / probe.write_gbps) / 1e9;
    estimate_s += est;
    const llama::LlamaConfig mc = ScaleModel(layers, a.quick);
    plan.push_back({{"size", name},
                    {"layers", layers},
                    {"params", mc.NumParameters()},
                    {"planned_nvme_bytes", state},
                    {"disk_needed_bytes", need},
                    {"nvme_state_over_ram", state / ram},
                    {"fits_on_disk", need <= free_bytes},
                    {"estimated_nvme_s", est}});
    if (!a.json) {
      std::printf(
          "  %-4s %3lld layers %6.2fB params: NVMe state %.1f GiB (%.2fx RAM), needs %.1f GiB "
          "free%s; ~%.0f s of NVMe traffic at aio r %.2f w %.2f GB/s\n",
          name.c_str(), static_cast<long long>(layers),
          static_cast<double>(mc.NumParameters()) / 1e9, Gib(state), state / ram, Gib(need),
          need > free_bytes ? " (more than the disk has)" : "", est, probe.read_gbps,
          probe.write_gbps);
    }
    if (need > free_bytes) {
      char what[160];
      std::snprintf(what, sizeof(what), "%s%s needs %.1f GiB", misfit.empty() ? "" : ", ",
                    name.c_str(), Gib(need));
      misfit += what;
      most_needed = std::max(most_needed, need);
    } else {
      fit += (fit.empty() ? "" : ",") + name;
      estimate_fit_s += est;
    }
  }
  // Every size is checked before any runs: a run refuses the sizes this disk cannot hold, and an
  // estimate says so (and exits 0: the estimate is complete either way).
  std::string refusal;
  if (!misfit.empty()) {
    char head[256];
    std::snprintf(head, sizeof(head), "not enough disk in %s (%.1f GiB free): ", o.dir.c_str(),
                  Gib(free_bytes));
    char tail[256];
    std::snprintf(tail, sizeof(tail), "; make %.1f GiB free there, or ", Gib(most_needed));
    refusal = head + misfit + tail +
              (fit.empty() ? std::string("point --dir at a larger disk")
                           : "run the sizes that fit: --sizes " + fit);
  }
  if (!a.json) {
    // With sizes the disk cannot hold, the run is refused: the time that matters is the run the
    // refusal advises (the sizes that fit), and all sizes' only on a disk that holds them.
    if (misfit.empty()) {
      std::printf(
          "scale: the whole run should take >= %.0f min (NVMe traffic alone; compute and "
          "the resident bound models add to it)\n",
          estimate_s / 60);
    } else if (!fit.empty()) {
      std::printf(
          "scale: a run of the sizes that fit (--sizes %s) should take >= %.0f min, all sizes "
          "on a disk that holds them >= %.0f min (NVMe traffic alone; compute and the resident "
          "bound models add to it)\n",
          fit.c_str(), estimate_fit_s / 60, estimate_s / 60);
    } else {
      std::printf(
          "scale: no size fits this disk; on one that holds them the whole run should take "
          ">= %.0f min (NVMe traffic alone; compute and the resident bound models add to it)\n",
          estimate_s / 60);
    }
    std::fflush(stdout);
  }
  json out;
  out["cpu_budget_bytes"] = o.cpu_budget;
  out["ram_bytes"] = ram;
  out["disk_free_bytes"] = free_bytes;
  out["largest_layers_the_disk_holds"] = max_layers;
  out["estimated_min_s"] = estimate_s;  // every size, on a disk that holds them
  out["estimated_min_s_sizes_that_fit"] = estimate_fit_s;
  out["plan"] = plan;
  out["sizes_that_fit"] = fit;
  if (a.estimate_only) {
    if (!refusal.empty()) out["not_enough_disk"] = refusal;
    if (a.json) std::printf("%s\n", out.dump(2).c_str());
    if (!a.json && !refusal.empty())
      std::printf("scale: a run would be refused: %s\n", refusal.c_str());
    return 0;
  }
  if (!refusal.empty()) Die(2, refusal);
  json results = json::array();
  bool failed = false;
  for (const auto& [name, layers] : sizes) {
    const std::string dir = (fs::path(o.dir) / name).string();
    json r = RunChild(a, layers, dir);
    fs::remove_all(dir, ec);
    r["size"] = name;
    failed |= r.contains("error");
    if (!a.json) {
      if (r.contains("error") || r.contains("refused")) {
        std::printf("  %-4s %s: %s\n", name.c_str(), r.contains("error") ? "FAILED" : "refused",
                    r.value(r.contains("error") ? "error" : "refused", std::string()).c_str());
      } else {
        const auto& l = r["losses"];
        std::printf(
            "  %-4s %.2fB params, NVMe state %.1f GiB: loss %.4f -> %.4f, peak RSS %.2f GiB "
            "(budget %.2f), step %.1f s vs bound %.1f s = %.2fx (%s); its NVMe bytes with reads "
            "and writes together %.1f s (step / that %.2f)\n",
            name.c_str(), r["params"].get<double>() / 1e9, Gib(r["nvme_state_bytes"].get<double>()),
            l.front().get<double>(), l.back().get<double>(), Gib(r["peak_rss_bytes"].get<double>()),
            Gib(static_cast<double>(o.cpu_budget)), r["steady_step_s"].get<double>(),
            r["bound_s"].get<double>(), r["step_over_bound"].get<double>(),
            r["bound_formed_by"].get<std::string>().c_str(), r["mixed_io_s"].get<double>(),
            r["step_over_mixed_io"].get<double>());
      }
      std::fflush(stdout);
    }
    results.push_back(r);
  }
  // The ratios, over the sizes that ran.
  double rss_min = 0, rss_max = 0, rss_largest = 0, rss_smallest = 0, step_over_bound = 0;
  bool all_ran = true;
  for (const json& r : results) {
    if (!r.contains("steady_step_s")) {
      all_ran = false;
      continue;
    }
    const double rss = r["peak_rss_bytes"].get<double>();
    if (rss_smallest == 0) rss_smallest = rss;
    rss_largest = rss;
    rss_min = rss_min == 0 ? rss : std::min(rss_min, rss);
    rss_max = std::max(rss_max, rss);
    step_over_bound = r["step_over_bound"].get<double>();
  }
  out["sizes"] = results;
  out["all_sizes_ran"] = all_ran;
  out["rss_largest_over_smallest"] = rss_smallest > 0 ? rss_largest / rss_smallest : 0.0;
  out["rss_max_over_min"] = rss_min > 0 ? rss_max / rss_min : 0.0;
  out["peak_rss_over_budget"] = rss_max / static_cast<double>(o.cpu_budget);
  out["step_over_bound"] = step_over_bound;
  out["step_over_bound_size"] = results.empty() ? "" : results.back().value("size", "");
  out["rss_counts"] =
      "each size's child process: pinned + pageable CPU memory and the emulated device's memory "
      "(host RAM on the host-emulated device), read before the bound's parts are measured";
  out["targets"] = {{"rss_largest_over_smallest", "<= 1.15"},
                    {"peak_rss_over_budget", "<= 1"},
                    {"step_over_bound", "<= 1.3 at the largest size"},
                    {"largest_nvme_state_over_ram", ">= 2"}};
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "scale: rss_largest_over_smallest %.3f (target <= 1.15), peak_rss_over_budget %.3f "
        "(target <= 1), step_over_bound %.2f at %s (target <= 1.3)%s\n",
        out["rss_largest_over_smallest"].get<double>(), out["peak_rss_over_budget"].get<double>(),
        step_over_bound, out["step_over_bound_size"].get<std::string>().c_str(),
        all_ran ? "" : "; not every size ran (see above): the ratios cover those that did");
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using strata::FlagParser;
  strata::bench::Args a;
  strata::bench::ScaleOptions& o = a.o;
  FlagParser flags("scale [options]: one CPU budget, three model sizes on NVMe (issue 36)");
  flags.Bool("json", &a.json, "print one JSON object");
  flags.Bool("quick", &a.quick, "tiny sizes (hidden 64; 2, 4 and 8 layers): the CI test");
  flags.Bool("estimate-only", &a.estimate_only, "check the disk, print the plan and the estimate");
  flags.String("sizes", &a.sizes, "sizes to run, of 1b, 2b, max (default all three)");
  flags.Int("max-layers", &a.max_layers, "cap the largest size's layers", 1, 100000);
  flags.Bytes("disk-free", &a.disk_free,
              "plan for this much free disk instead of what --dir's has (an estimate: any; a "
              "run: at most what --dir's has)");
  flags.Int("child-layers", &a.child_layers, "(internal) run one size of N layers here", 1, 100000);
  flags.String("dir", &o.dir, "swap directory (default ./scale-swap; sizes' files removed)");
  flags.Int("steps", &o.steps, "optimizer steps per size", 2, 1000);
  flags.Int("seq", &o.seq, "tokens in the (single) sequence", 2, 65536);
  flags.Choice("dtype", &o.dtype, {"bf16", "fp32"}, "parameter (compute) dtype");
  flags.Bytes("cpu-budget", &o.cpu_budget,
              "the CPU memory budget: strata.cpu_memory (less the emulated device's arena, RAM "
              "here) and strata.pinned_memory_limit");
  flags.Int("sub-group-size", &o.sub_group_size, "zero_optimization.sub_group_size (elements)",
            4096, int64_t{1} << 40);
  flags.Int("max-live-parameters", &o.max_live, "zero_optimization.stage3_max_live_parameters", 1,
            int64_t{1} << 40);
  flags.Int("reduce-bucket-size", &o.bucket,
            "zero_optimization.reduce_bucket_size and stage3_prefetch_bucket_size (elements)", 1,
            int64_t{1} << 40);
  flags.Int("max-in-cpu", &o.max_in_cpu, "offload_param.max_in_cpu (elements kept in RAM)", 0,
            int64_t{1} << 40);
  flags.Int("param-buffer-count", &o.param_buffers, "offload_param.buffer_count", 1, 64);
  flags.Int("opt-buffer-count", &o.opt_buffers, "offload_optimizer.buffer_count", 1, 64);
  flags.Bytes("sweep-bytes", &o.sweep_bytes, "swap-file bytes the bound's aio sweep reads");
  flags.String("trace", &o.trace, "Chrome trace of each size's engine: <trace>.<layers>.json");
  flags.Int("threads", &o.threads, "threads for oneTBB (GEMMs, kernels) and the CPU optimizer", 1,
            256);
  std::vector<std::string> positional;
  strata::Status s = flags.Parse(argc, argv, 1, &positional);
  if (!s.ok()) strata::bench::Die(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) strata::bench::Die(2, "unexpected argument '" + positional[0] + "'");
  if (a.quick && !flags.WasSet("cpu-budget")) o.cpu_budget = uint64_t{1} << 30;
  if (a.quick && !flags.WasSet("sub-group-size")) o.sub_group_size = 16384;
  if (a.quick && !flags.WasSet("sweep-bytes")) o.sweep_bytes = uint64_t{16} << 20;
  return strata::bench::Run(a);
}
