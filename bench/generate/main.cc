// generate: ZeRO-Inference decoding speed against its bound (issue #41, "Benchmark").
//
//   generate [--json] [--hidden 1024 --layers 8 --heads 16 --intermediate 2816 --vocab 4096]
//            [--prompt-len 16] [--new-tokens 8] [--device-mem 64M] [--dir DIR] [--threads 2]
//            [--rounds 3]
//
// A Llama (bf16 weights) decodes with its weights on NVMe (offload_param nvme, max_in_cpu 0:
// every forward reads every streamed weight from the swap file) on a host-emulated device of
// --device-mem, several times smaller than the weights, so the device holds a few layers at a
// time (stage3_max_live_parameters: a quarter of the device, which leaves room for the KV cache,
// the workspace and the allocator's fragmentation). Per batch size (1 and 8): a prefill of
// --prompt-len tokens, one untimed decode step, then --new-tokens timed steps; tokens/s =
// batch x steps / seconds. In the same run:
//   io bound   = streamed weight bytes per forward / the read speed of an AioHandle sweep of the
//                swap files (the config's aio options, 1 MiB requests: Strata's own aio here);
//   cpu bound  = the same decode step with every weight resident on an uncapped device, plus the
//                streamed bytes / this host's memcpy speed (the host-emulated device's H2D copy
//                of each gathered weight is CPU work on this machine, as bench/overlap counts it).
//   bound(b)   = max(io bound, cpu bound(b)) per step.
// Each part runs --rounds times in ABBA order (resident and NVMe alternating, an aio sweep and a
// memcpy probe per round); the figures are medians.
// Targets: batch1_over_bound <= 1.2 (a step at batch 1 costs what reading the weights costs) and
// batch8_over_batch1 >= 4 (batching amortises the read).
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/overlap/bound_parts.h"
#include "core/flags.h"
#include "core/trace.h"
#include "engine/config/config.h"
#include "engine/zero_inference.h"
#include "models/llama/model/llama_decode.h"
#include "offload/device/registry.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t hidden = 1024, layers = 8, heads = 16, intermediate = 2816, vocab = 4096;
  int64_t prompt_len = 16, new_tokens = 8, threads = 2, rounds = 3;
  uint64_t device_mem = 64ull << 20;
  std::string dir = "generate-bench-swap";
  std::string trace;  // Chrome trace of the NVMe runs ("": none)
  bool json = false;
};

std::vector<std::vector<int32_t>> Prompts(int64_t batch, int64_t len, int64_t vocab) {
  std::vector<std::vector<int32_t>> p(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < len - b % 3; ++t) {  // lengths differ a little
      p[static_cast<size_t>(b)].push_back(static_cast<int32_t>((b * 131 + t * 17) % vocab));
    }
  }
  return p;
}

// Seconds per decode step (after a prefill and one untimed step).
Result<double> DecodeSeconds(llama::LlamaForCausalLM* model, Device* device, const Stream& s,
                             ZeroInference* zi, int64_t batch, const Options& o) {
  STRATA_ASSIGN_OR_RETURN(
      auto dec, llama::LlamaDecoder::Create(model, batch, o.prompt_len + o.new_tokens + 2));
  if (zi != nullptr) dec->set_on_pass_end([zi]() { return zi->FinishForward(); });
  const nn::RunContext ctx{device, s, false};
  std::vector<float> logits;
  STRATA_RETURN_IF_ERROR(dec->Prefill(ctx, Prompts(batch, o.prompt_len, o.vocab), &logits));
  std::vector<int32_t> next(static_cast<size_t>(batch), 1);
  STRATA_RETURN_IF_ERROR(dec->Decode(ctx, next, &logits));
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < o.new_tokens; ++i) {
    TraceSpan span(zi != nullptr ? CurrentTracer() : nullptr, "decode step", "compute");
    span.AddArg("batch", static_cast<double>(batch));
    for (int64_t b = 0; b < batch; ++b) {  // greedy, so the step depends on the logits
      const float* row = logits.data() + b * o.vocab;
      next[static_cast<size_t>(b)] =
          static_cast<int32_t>(std::max_element(row, row + o.vocab) - row);
    }
    STRATA_RETURN_IF_ERROR(dec->Decode(ctx, next, &logits));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count() /
         static_cast<double>(o.new_tokens);
}

Status Run(const Options& o) {
  llama::LlamaConfig mc;
  mc.vocab_size = o.vocab, mc.hidden_size = o.hidden, mc.intermediate_size = o.intermediate;
  mc.num_hidden_layers = o.layers, mc.num_attention_heads = o.heads;
  mc.num_key_value_heads = o.heads, mc.max_position_embeddings = 4096;
  mc.torch_dtype = DType::kBFloat16;
  const DType dtype = DType::kBFloat16;
  const uint64_t weight_bytes = static_cast<uint64_t>(mc.NumParameters()) * 2;
  const std::vector<int64_t> batches = {1, 8};

  // CPU bound: every weight resident on an uncapped device (kept for all rounds).
  DeviceOptions rdev;
  rdev.host.memory_bytes = weight_bytes * 2 + (512ull << 20);
  rdev.host.populate_memory = false;
  STRATA_ASSIGN_OR_RETURN(auto rdevice, CreateDevice(rdev));
  STRATA_ASSIGN_OR_RETURN(Stream rs, rdevice->CreateStream());
  llama::LlamaModelOptions rmo;
  rmo.dtype = dtype, rmo.allocate_grads = false, rmo.seed = 3;
  STRATA_ASSIGN_OR_RETURN(auto rmodel, llama::LlamaForCausalLM::Create(mc, rdevice.get(), rmo));

  // --trace: the aio threads' spans and one span per timed decode step, NVMe runs only. Made
  // before the store (destroyed after its aio threads) and uninstalled on every way out.
  std::unique_ptr<Tracer> tracer;
  if (!o.trace.empty()) tracer = std::make_unique<Tracer>(o.trace, 0);
  struct Uninstall {
    ~Uninstall() { SetCurrentTracer(nullptr); }
  } uninstall;

  // ZeRO-Inference from NVMe on a small device.
  std::filesystem::remove_all(o.dir);
  const int64_t largest = std::max(o.hidden * o.intermediate, o.hidden * o.vocab);
  const int64_t live = static_cast<int64_t>(o.device_mem / 4 / 2);  // a quarter of it, bf16
  nlohmann::json cfg = {{"train_batch_size", 1},
                        {"bf16", {{"enabled", true}}},
                        {"zero_optimization",
                         {{"stage", 3},
                          {"offload_param",
                           {{"device", "nvme"},
                            {"nvme_path", o.dir},
                            {"max_in_cpu", 0},
                            {"buffer_count", 16},
                            {"buffer_size", largest}}},
                          {"stage3_param_persistence_threshold", o.hidden},
                          {"stage3_max_live_parameters", std::max(live, largest)},
                          {"stage3_prefetch_bucket_size", std::max(live / 2, largest)}}}};
  STRATA_ASSIGN_OR_RETURN(Config config, LoadConfigText(cfg.dump(), "bench generate", {}));
  DeviceOptions dev;
  dev.host.memory_bytes = o.device_mem;
  dev.host.populate_memory = false;
  STRATA_ASSIGN_OR_RETURN(auto device, CreateDevice(dev));
  STRATA_ASSIGN_OR_RETURN(Stream s, device->CreateStream());
  llama::LlamaModelOptions mo;
  mo.dtype = dtype, mo.allocate_parameters = false, mo.allocate_grads = false;
  STRATA_ASSIGN_OR_RETURN(auto model, llama::LlamaForCausalLM::Create(mc, device.get(), mo));
  ParamInitFn init = [](const nn::Parameter& p, std::span<float> out) -> Status {
    const bool norm = p.shape().ndim() == 1;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = norm
                   ? 1.0f
                   : 0.02f * std::sin(static_cast<float>(i) * 0.7f + static_cast<float>(p.index()));
    }
    return Status::Ok();
  };
  STRATA_ASSIGN_OR_RETURN(auto zi, ZeroInference::Create(*model, model->NamedParameters(), config,
                                                         *device, s, dtype, init));

  // Rounds in ABBA order (resident, NVMe, NVMe, resident, ...), each batch size; medians.
  std::vector<std::vector<double>> cpu_r(batches.size()), nvme_r(batches.size());
  std::vector<double> aio_r, memcpy_r;
  uint64_t read_per_step = 0;
  for (int64_t round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < batches.size(); ++i) {
      for (int part = 0; part < 2; ++part) {
        const bool nvme = (part == 0) == (round % 2 == 1);
        if (!nvme) {
          STRATA_ASSIGN_OR_RETURN(
              double t, DecodeSeconds(rmodel.get(), rdevice.get(), rs, nullptr, batches[i], o));
          cpu_r[i].push_back(t);
          continue;
        }
        const uint64_t r0 = zi->stats().nvme_read_bytes;
        SetCurrentTracer(tracer.get());
        STRATA_ASSIGN_OR_RETURN(
            double t, DecodeSeconds(model.get(), device.get(), s, zi.get(), batches[i], o));
        SetCurrentTracer(nullptr);
        nvme_r[i].push_back(t);
        // prefill + untimed step + timed steps: one forward each
        if (i == 0) {
          read_per_step =
              (zi->stats().nvme_read_bytes - r0) / static_cast<uint64_t>(o.new_tokens + 2);
        }
      }
    }
    STRATA_ASSIGN_OR_RETURN(AioSpeed sweep, MeasureAioSweep(o.dir, config.aio, 1 << 20, 0));
    aio_r.push_back(sweep.read_gbps);
    memcpy_r.push_back(MeasureMemcpyGbps());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  AioSpeed aio;
  aio.read_gbps = median(aio_r);
  STRATA_ASSIGN_OR_RETURN(AioSpeed engine_desc, MeasureAioSweep(o.dir, config.aio, 1 << 20, 0));
  aio.engine = engine_desc.engine;
  std::vector<double> cpu_s, nvme_s;
  for (size_t i = 0; i < batches.size(); ++i) {
    cpu_s.push_back(median(cpu_r[i]));
    nvme_s.push_back(median(nvme_r[i]));
  }
  const ZeroInferenceStats st = zi->stats();
  const double io_s = static_cast<double>(read_per_step) / (aio.read_gbps * 1e9);
  const double memcpy_gbps = median(memcpy_r);
  const double copy_s = static_cast<double>(read_per_step) / (memcpy_gbps * 1e9);
  for (double& c : cpu_s) c += copy_s;

  nlohmann::ordered_json j;
  j["model_params"] = mc.NumParameters();
  j["weight_bytes"] = weight_bytes;
  j["device_bytes"] = o.device_mem;
  j["weights_over_device"] = static_cast<double>(weight_bytes) / static_cast<double>(o.device_mem);
  j["peak_gathered_bytes"] = st.peak_live_bytes;
  j["rounds"] = o.rounds;
  j["nvme_read_bytes_per_step"] = read_per_step;
  j["aio_read_gbps"] = aio.read_gbps;
  j["aio_engine"] = aio.engine;
  j["io_bound_s"] = io_s;
  j["memcpy_gbps"] = memcpy_gbps;
  j["h2d_copy_s"] = copy_s;
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::string k = "batch" + std::to_string(batches[i]);
    const double bound = std::max(io_s, cpu_s[i]);
    j[k + "_step_s"] = nvme_s[i];
    j[k + "_cpu_bound_s"] = cpu_s[i];
    j[k + "_bound_s"] = bound;
    j[k + "_tokens_per_s"] = static_cast<double>(batches[i]) / nvme_s[i];
    j[k + "_over_bound"] = nvme_s[i] / bound;
  }
  j["batch8_over_batch1"] = (8.0 / nvme_s[1]) / (1.0 / nvme_s[0]);
  j["prefetch_hits"] = st.prefetch_hits;
  j["prefetch_misses"] = st.prefetch_misses;
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "weights %.1f MiB (%.1fx the device's %.0f MiB), NVMe read %.1f MiB/step, aio read %.2f "
        "GB/s (%s)\n",
        static_cast<double>(weight_bytes) / (1 << 20), j["weights_over_device"].get<double>(),
        static_cast<double>(o.device_mem) / (1 << 20),
        static_cast<double>(read_per_step) / (1 << 20), aio.read_gbps, aio.engine.c_str());
    for (size_t i = 0; i < batches.size(); ++i) {
      const std::string k = "batch" + std::to_string(batches[i]);
      std::printf(
          "batch %lld: %.2f tokens/s, %.3f s/step; bound %.3f s (io %.3f, cpu %.3f): "
          "%.2fx the bound\n",
          static_cast<long long>(batches[i]), j[k + "_tokens_per_s"].get<double>(), nvme_s[i],
          j[k + "_bound_s"].get<double>(), io_s, cpu_s[i], j[k + "_over_bound"].get<double>());
    }
    std::printf("batch 8 throughput / batch 1: %.2fx\n", j["batch8_over_batch1"].get<double>());
  }
  zi.reset();
  model.reset();
  rmodel.reset();
  STRATA_RETURN_IF_ERROR(device->DestroyStream(s));
  STRATA_RETURN_IF_ERROR(rdevice->DestroyStream(rs));
  std::filesystem::remove_all(o.dir);
  return Status::Ok();
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  using strata::bench::Options;
  Options o;
  strata::FlagParser flags("generate [--json] [model shape] [--device-mem 64M] [--dir DIR]");
  flags.Int("hidden", &o.hidden, "hidden size", 8);
  flags.Int("layers", &o.layers, "decoder layers", 1);
  flags.Int("heads", &o.heads, "attention heads", 1);
  flags.Int("intermediate", &o.intermediate, "MLP size", 1);
  flags.Int("vocab", &o.vocab, "vocabulary", 256);
  flags.Int("prompt-len", &o.prompt_len, "prompt tokens", 3);
  flags.Int("new-tokens", &o.new_tokens, "timed decode steps", 1);
  flags.Int("threads", &o.threads, "oneTBB threads", 1);
  flags.Int("rounds", &o.rounds, "ABBA rounds (medians reported)", 1);
  flags.Bytes("device-mem", &o.device_mem, "the emulated device's memory");
  flags.String("dir", &o.dir, "NVMe swap directory (removed after)");
  flags.String("trace", &o.trace, "Chrome trace of the NVMe runs: aio spans, decode steps");
  flags.Bool("json", &o.json, "print JSON");
  std::vector<std::string> positional;
  if (strata::Status s = flags.Parse(argc, argv, 1, &positional); !s.ok()) {
    std::fprintf(stderr, "generate: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism,
                              static_cast<size_t>(o.threads));
  if (strata::Status s = strata::bench::Run(o); !s.ok()) {
    std::fprintf(stderr, "generate: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
