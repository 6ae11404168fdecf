// zero_step: what the engine costs on top of a bare training loop (issue #14's benchmark).
//
//   zero_step [--preset small] [--batch 4] [--seq 256] [--rounds 5] [--steps 1] [--threads 2]
//             [--dtype fp32|bf16] [--link-gbps 25] [--no-time-copies] [--json]
//
// Three variants train the same Llama preset on one fixed batch, on one host-emulated device
// whose host<->device link is paced at --link-gbps, with the same threads (oneTBB, GEMM panels
// included, capped to --threads; the CPU optimizer runs in that arena):
//   bare    forward, backward, CPU AdamW over fp32 master weights — nn/ and cpu_adam/ only;
//   stage0  strata::Engine, zero_optimization.stage 0, optimizer on the device tier;
//   stage3  the engine at stage 3 + offload_optimizer cpu + offload_param cpu. If Initialize
//           refuses that (engines without stage 3), the bench says so and runs stage 2 +
//           offload_optimizer cpu instead ("stage3_variant" names what ran).
// They run interleaved for --rounds rounds of --steps steps, each round starting one variant
// later (bare stage0 stage3, stage0 stage3 bare, ...); every variant takes one warm-up step
// first. Ratios are medians over rounds of the round's time over the bare loop's time in the
// same round; *_ops_adjusted ratios charge every variant the bare loop's nn op time of that
// round (the ops are identical), which keeps a loaded machine's noise out of the comparison.
// All variants do the same number of steps from the same initial values, so at the end their
// fp32 master weights are compared: the same math gives the same bits (world 1, same reduction
// order), for fp32 and bf16 alike.
//
// --json prints one object with stage0_over_bare, stage3_cpu_over_bare, stage3_variant, the
// per-part medians of each variant (copies and collectives measured on their streams through
// CountingDevice and TimedCommunicator) and the parameter check. Issue #14's targets: <= 1.03
// and <= 1.10.
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/zero_step/counting_device.h"
#include "bench/zero_step/report.h"
#include "bench/zero_step/variants.h"
#include "core/flags.h"
#include "models/llama/config/llama_config.h"
#include "nn/ops/op_registry.h"
#include "offload/device/host/host_device.h"

namespace strata::bench {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "zero_step: %s\n", what.c_str());
  std::exit(1);
}
template <typename T>
T Check(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.status().ToString());
  return std::move(r).value();
}

struct Options {
  std::string preset = "small";
  int64_t batch = 4, seq = 256, rounds = 5, steps = 1, threads = 2;
  std::string dtype = "fp32";
  double link_gbps = 25.0;
  uint64_t device_memory = uint64_t{8} << 30;
  bool time_copies = true;
  bool json = false;
};

// A DeepSpeed config: AdamW at a constant LR, no clipping (the bare loop has none), world 1.
std::string ConfigJson(const Options& o, const std::string& zero) {
  nlohmann::json c = {
      {"train_micro_batch_size_per_gpu", o.batch},
      {"gradient_accumulation_steps", 1},
      {"gradient_clipping", 0.0},
      {"optimizer",
       {{"type", "AdamW"},
        {"params",
         {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", nlohmann::json::parse(zero)},
      {"strata", {{"link_gbps", o.link_gbps}}}};
  if (o.dtype == "bf16") c["bf16"] = {{"enabled", true}};
  return c.dump();
}

Hyperparams BareAdam() {  // the config's optimizer, rounded to float as the engine does
  Hyperparams hp;
  hp.lr = static_cast<float>(1e-3);
  hp.beta1 = static_cast<float>(0.9);
  hp.beta2 = static_cast<float>(0.999);
  hp.eps = static_cast<float>(1e-8);
  hp.weight_decay = static_cast<float>(0.01);
  hp.adam_w_mode = true;
  hp.bias_correction = true;
  return hp;
}

// One step of `v`, with the copies it made through `device`.
StepTimes TimedStep(Variant& v, CountingDevice& device, const nn::TokenBatch& batch) {
  device.ResetCounts();
  StepTimes t = Check(v.RunStep(batch), v.name());
  t.copies = device.counts();
  return t;
}

int Run(const Options& o) {
  tbb::global_control cap(tbb::global_control::max_allowed_parallelism,
                          static_cast<size_t>(o.threads));
  llama::LlamaConfig mc = Check(llama::LlamaPreset(o.preset), "--preset");
  const DType dtype = o.dtype == "bf16" ? DType::kBFloat16 : DType::kFloat32;

  HostDeviceOptions ho;
  ho.memory_bytes = o.device_memory;
  ho.populate_memory = false;
  ho.link_bandwidth_gbps = o.link_gbps;
  std::unique_ptr<Device> host = Check(CreateHostDevice(ho), "host device");
  auto device = std::make_unique<CountingDevice>(host.get(), o.time_copies);

  std::vector<int32_t> ids(static_cast<size_t>(o.batch * o.seq));
  uint64_t x = 12345;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(mc.vocab_size));
  }
  const nn::TokenBatch batch{ids, ids, o.batch, o.seq};

  std::vector<std::unique_ptr<Variant>> variants;
  BareOptions bo;
  bo.model = mc;
  bo.dtype = dtype;
  bo.adam = BareAdam();
  variants.push_back(Check(CreateBareLoop(*device, bo), "bare loop"));
  EngineVariantOptions eo;
  eo.model = mc;
  eo.dtype = dtype;
  eo.name = "stage0";
  eo.config_json = ConfigJson(o, R"({"stage": 0})");
  variants.push_back(Check(CreateEngineVariant(*device, eo), "engine stage 0"));
  eo.name = "stage3";
  eo.config_json = ConfigJson(
      o,
      R"({"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}})");
  std::string stage3_variant = "stage 3 + offload_optimizer cpu + offload_param cpu";
  std::string refused;
  Result<std::unique_ptr<Variant>> s3 = CreateEngineVariant(*device, eo);
  if (!s3.ok()) {
    refused = s3.status().ToString();
    std::fprintf(stderr,
                 "zero_step: the engine refused stage 3 (%s); running stage 2 + "
                 "offload_optimizer cpu in its place\n",
                 refused.c_str());
    eo.name = "stage2+cpu";
    eo.config_json = ConfigJson(o, R"({"stage": 2, "offload_optimizer": {"device": "cpu"}})");
    stage3_variant = "stage 2 + offload_optimizer cpu (stage 3 refused)";
    s3 = CreateEngineVariant(*device, eo);
  }
  variants.push_back(Check(std::move(s3), "engine " + eo.name));

  nn::SetOpTiming(true);
  std::vector<VariantSamples> samples(variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {  // warm-up: buffers, page faults, BLAS pool
    samples[v].name = variants[v]->name();
    samples[v].last_loss = TimedStep(*variants[v], *device, batch).loss;
  }
  for (int64_t r = 0; r < o.rounds; ++r) {
    // Each round starts one variant later (a b c, b c a, c a b, ...), so no variant always runs
    // first or right after the same neighbour.
    for (size_t i = 0; i < variants.size(); ++i) {
      const size_t v = (i + static_cast<size_t>(r)) % variants.size();
      StepTimes sum;
      for (int64_t s = 0; s < o.steps; ++s) {
        const StepTimes t = TimedStep(*variants[v], *device, batch);
        Accumulate(t, &sum);
      }
      samples[v].rounds.push_back(sum);
      samples[v].last_loss = sum.loss;
    }
    if (!o.json) {
      std::fprintf(stderr, "  round %lld:", static_cast<long long>(r));
      for (const VariantSamples& s : samples) {
        const StepTimes& t = s.rounds.back();
        const double n = static_cast<double>(o.steps);
        std::fprintf(stderr, " %s %.3f s (ops %.3f)", s.name.c_str(), t.total_s / n, t.ops_s / n);
      }
      std::fprintf(stderr, "\n");
    }
  }
  nn::SetOpTiming(false);

  std::vector<std::vector<std::vector<float>>> finals;
  for (auto& v : variants) finals.push_back(Check(v->MasterParameters(), v->name() + " params"));

  RunInfo info;
  info.preset = o.preset;
  info.params = mc.NumParameters();
  info.batch = o.batch;
  info.seq = o.seq;
  info.rounds = o.rounds;
  info.steps = o.steps;
  info.threads = o.threads;
  info.dtype = o.dtype;
  info.link_gbps = o.link_gbps;
  info.stage3_variant = stage3_variant;
  info.stage3_refused = refused;
  const nlohmann::json out = BuildReport(info, samples, finals);
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    PrintReport(out);
  }
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using strata::FlagParser;
  strata::bench::Options o;
  FlagParser flags("zero_step [options]: the engine's step against a bare nn/ training loop");
  flags.String("preset", &o.preset, "Llama preset (tiny, small, 1b, 7b)");
  flags.Int("batch", &o.batch, "sequences per step", 1, 1024);
  flags.Int("seq", &o.seq, "tokens per sequence", 2, 4096);
  flags.Int("rounds", &o.rounds, "interleaved measurement rounds (median)", 1, 1000);
  flags.Int("steps", &o.steps, "steps per variant per round", 1, 1000);
  flags.Int("threads", &o.threads, "threads for oneTBB (GEMMs, kernels) and the CPU optimizer", 1,
            256);
  flags.Choice("dtype", &o.dtype, {"fp32", "bf16"}, "parameter (compute) dtype");
  flags.Double("link-gbps", &o.link_gbps, "emulated host<->device link, GB/s (0: unpaced)");
  flags.Bytes("device-memory", &o.device_memory, "emulated device memory");
  flags.Bool("time-copies", &o.time_copies,
             "time each device copy on its stream (two host tasks per copy; --no-time-copies "
             "still counts calls and bytes)");
  flags.Bool("json", &o.json, "print one JSON object");
  std::vector<std::string> positional;
  strata::Status s = flags.Parse(argc, argv, 1, &positional);
  if (!s.ok()) strata::bench::Die(s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) strata::bench::Die("unexpected argument '" + positional[0] + "'");
  if (o.link_gbps < 0) strata::bench::Die("--link-gbps must be >= 0");
  return strata::bench::Run(o);
}
