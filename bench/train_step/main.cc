// train_step: forward + backward tokens/s of LlamaForCausalLM on the host device against the same
// model in PyTorch eager (torch_llama.py: same shapes, batch, sequence length and threads),
// interleaved round by round in one run, plus the share of the Strata step spent in GEMMs.
//
//   train_step [--models small,1b,llama3,qwen3] [--layers-1b 2] [--layers 1] [--batch N]
//              [--seq 256] [--steps 2] [--rounds 2] [--threads 2] [--lm-head-chunk auto|N]
//              [--json]
//
// `small` is the preset of that name (batch 4 by default); `1b` is TinyLlama-1.1B's shape with
// --layers-1b decoder layers (batch 1 by default, so a step takes seconds, not minutes).
// `llama3` is the llama3.2-1b preset (Llama 3.2 1B's config.json: hidden 2048, intermediate
// 8192, 32 heads, 8 kv heads, head_dim 64, vocab 128256, tied, rope_theta 5e5 with rope_scaling
// llama3 factor 32 / low 1 / high 4 / original 8192, rms eps 1e-5) and `qwen3` the qwen3-0.6b
// preset (Qwen3-0.6B's: hidden 1024, intermediate 3072, 16 heads, 8 kv heads, explicit head_dim
// 128, q_norm / k_norm over each head before RoPE, vocab 151936, tied, rope_theta 1e6, rms eps
// 1e-6), each with --layers decoder layers (batch 2 by default). The PyTorch side is given the
// same config.json (LlamaConfigJson) and builds the same model from it. All fp32. The LM head
// + loss of Strata runs in chunks (--lm-head-chunk, strata.lm_head_chunk's rule by default);
// for each model the head's device bytes (one chunk of logits + lse) are printed against the
// whole logits PyTorch makes (tokens x vocab floats) and both steps' measured peaks. Strata runs on
// HostDevice with oneTBB (GEMM panels included) capped to --threads threads; PyTorch with
// torch.set_num_threads(--threads). Medians over rounds.
//   --json prints {"models": [...], "strata_over_torch": min over models, "gemm_fraction": min}.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/flags.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "nn/modules/lm/lm_head_loss.h"
#include "nn/ops/op_registry.h"
#include "offload/device/host/host_device.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "train_step: %s\n", what.c_str());
  std::exit(1);
}
void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what + ": " + s.ToString());
}
template <typename T>
T Check(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.status().ToString());
  return std::move(r).value();
}

// The PyTorch side: one python process per model, driven over pipes ("run N" -> seconds).
class TorchProcess {
 public:
  TorchProcess(const std::string& script, const std::string& config_json, int64_t batch,
               int64_t seq, int threads) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) Die("pipe failed");
    pid_ = fork();
    if (pid_ < 0) Die("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      const std::string b = std::to_string(batch), s = std::to_string(seq);
      const std::string t = std::to_string(threads);
      execl("/usr/bin/python3", "python3", script.c_str(), config_json.c_str(), b.c_str(),
            s.c_str(), t.c_str(), static_cast<char*>(nullptr));
      std::perror("exec /usr/bin/python3");
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    if (ReadLine() != "ready") Die("torch_llama.py did not start (is python3-torch installed?)");
  }
  ~TorchProcess() {
    std::fputs("quit\n", in_);
    std::fclose(in_);
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }
  int64_t Params() {
    std::fputs("params\n", in_);
    std::fflush(in_);
    return std::atoll(ReadLine().c_str());
  }
  double Mem() {
    std::fputs("mem\n", in_);
    std::fflush(in_);
    return std::atof(ReadLine().c_str());
  }
  double Run(int64_t steps) {
    std::fprintf(in_, "run %lld\n", static_cast<long long>(steps));
    std::fflush(in_);
    return std::atof(ReadLine().c_str());
  }

 private:
  std::string ReadLine() {
    char buf[256];
    if (std::fgets(buf, sizeof(buf), out_) == nullptr) Die("torch_llama.py exited");
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct ModelResult {
  std::string name;
  int64_t params = 0, batch = 0, seq = 0;
  double strata_tokens_per_s = 0, torch_tokens_per_s = 0, gemm_fraction = 0, gemm_gflops = 0;
  int64_t head_rows = 0;
  // Strata: the head's logits chunk + lse; the step's device peak over params + grads. PyTorch:
  // its whole logits (tokens x vocab fp32) and its step's peak RSS growth.
  uint64_t strata_head_bytes = 0, strata_step_peak_bytes = 0;
  uint64_t torch_logits_bytes = 0, torch_step_peak_bytes = 0;
};

ModelResult RunModel(const std::string& name, llama::LlamaConfig c, int64_t batch, int64_t seq,
                     int64_t steps, int64_t rounds, int threads, const std::string& script,
                     int64_t head_chunk) {
  ModelResult r{name, c.NumParameters(), batch, seq};
  HostDeviceOptions ho;
  ho.memory_bytes = size_t{12} << 30;
  ho.populate_memory = false;
  auto device = Check(CreateHostDevice(ho), "host device");
  Stream stream = Check(device->CreateStream(), "stream");
  llama::LlamaModelOptions mo;
  mo.seed = 1;
  mo.lm_head_chunk_tokens = head_chunk;
  auto model = Check(llama::LlamaForCausalLM::Create(c, device.get(), mo), "model");
  const uint64_t held_bytes = device->MemoryStats().in_use_bytes;  // parameters + gradients
  const int64_t n = batch * seq;
  r.head_rows = nn::LmHeadLoss::RowsPerChunk(n, c.hidden_size, c.vocab_size, head_chunk);
  r.strata_head_bytes = nn::LmHeadLoss::ScratchBytes(n, c.hidden_size, c.vocab_size, head_chunk);
  r.torch_logits_bytes = static_cast<uint64_t>(n * c.vocab_size) * sizeof(float);
  std::vector<int32_t> ids(static_cast<size_t>(batch * seq));
  uint64_t x = 12345;
  for (int32_t& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(c.vocab_size));
  }
  const nn::TokenBatch tb{ids, ids, batch, seq};
  const nn::RunContext ctx{device.get(), stream, true};
  auto strata_step = [&](int64_t n) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      Check(model->Forward(ctx, tb), "forward");
      Check(model->Backward(ctx), "backward");
    }
    Check(stream.Synchronize(), "step");
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // The PyTorch model reads the same config.json fields Strata's would (LlamaConfigJson):
  // head_dim, model_type (qwen3: q_norm / k_norm), rope_scaling, tie_word_embeddings.
  const std::string cfg = llama::LlamaConfigJson(c).dump();
  TorchProcess torch(script, cfg, batch, seq, threads);
  // A first check that both sides built the same model from the config (shapes, head_dim,
  // q/k norms, tying): the same parameter count.
  if (const int64_t p = torch.Params(); p != r.params) {
    Die(name + ": torch_llama.py built " + std::to_string(p) + " parameters, Strata " +
        std::to_string(r.params));
  }
  strata_step(1);  // warm-up: buffers, page faults, BLAS pool
  torch.Run(1);
  r.strata_step_peak_bytes = device->MemoryStats().peak_bytes - held_bytes;
  r.torch_step_peak_bytes = static_cast<uint64_t>(torch.Mem());
  std::vector<double> s_tps, t_tps, frac, gflops;
  const double tokens = static_cast<double>(batch * seq * steps);
  for (int64_t round = 0; round < rounds; ++round) {
    nn::ResetOpTimes();
    nn::SetOpTiming(true);
    const double s = strata_step(steps);
    nn::SetOpTiming(false);
    const nn::OpTimes t = nn::GetOpTimes();
    const double gemm_s = static_cast<double>(t.ns[static_cast<size_t>(nn::OpKind::kGemm)]) * 1e-9;
    s_tps.push_back(tokens / s);
    frac.push_back(gemm_s / s);
    // 6 * params * tokens covers the linear layers (the attention GEMMs add a little).
    gflops.push_back(6.0 * static_cast<double>(r.params) * tokens / gemm_s * 1e-9);
    t_tps.push_back(tokens / torch.Run(steps));
    std::fprintf(stderr, "  %s round %lld: strata %.1f tok/s (gemm %.0f%%), torch %.1f tok/s\n",
                 name.c_str(), static_cast<long long>(round), s_tps.back(), 100 * frac.back(),
                 t_tps.back());
  }
  r.strata_tokens_per_s = Median(s_tps);
  r.torch_tokens_per_s = Median(t_tps);
  r.gemm_fraction = Median(frac);
  r.gemm_gflops = Median(gflops);
  return r;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;  // NOLINT
  std::string models = "small,1b";
  int64_t layers_1b = 2, layers = 1, batch = 0, seq = 256, steps = 2, rounds = 2, threads = 2;
  std::string head_chunk = "auto";
  bool json = false;
  std::string script = STRATA_TRAIN_STEP_SCRIPT;
  FlagParser flags("train_step [options]");
  flags.String("models", &models, "comma-separated: small, 1b, llama3, qwen3");
  flags.Int("layers-1b", &layers_1b, "decoder layers of the 1b-shaped model", 1, 22);
  flags.Int("layers", &layers, "decoder layers of the llama3- and qwen3-shaped models", 1, 36);
  flags.String("lm-head-chunk", &head_chunk, "tokens per LM head chunk: auto, 0 (whole) or N");
  flags.Int("batch", &batch, "sequences per step (0: 4 for small, 1 for 1b)", 0, 1024);
  flags.Int("seq", &seq, "tokens per sequence", 2, 2048);
  flags.Int("steps", &steps, "forward+backward steps per measurement", 1, 1000);
  flags.Int("rounds", &rounds, "interleaved measurement rounds (median)", 1, 100);
  flags.Int("threads", &threads, "threads for both (oneTBB; torch.set_num_threads)", 1, 256);
  flags.String("script", &script, "the PyTorch reference script");
  flags.Bool("json", &json, "print one JSON object");
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, &positional);
  if (!s.ok()) Die(s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  tbb::global_control cap(tbb::global_control::max_allowed_parallelism,
                          static_cast<size_t>(threads));
  const int64_t chunk =
      head_chunk == "auto" ? nn::LmHeadLoss::kAutoChunk : std::atoll(head_chunk.c_str());
  if (chunk < 0 && head_chunk != "auto") Die("--lm-head-chunk: auto, 0 or a token count");

  std::vector<ModelResult> results;
  std::stringstream list(models);
  for (std::string m; std::getline(list, m, ',');) {
    llama::LlamaConfig c;
    int64_t b = batch;
    std::string name = m;
    if (m == "llama3" || m == "qwen3") {
      // The real models' config.json fields (the presets the models use: head_dim, q/k norms,
      // rope_scaling, tied head), with --layers decoder layers, in fp32.
      const bool q = m == "qwen3";
      c = Check(llama::LlamaPreset(q ? "qwen3-0.6b" : "llama3.2-1b"), "preset");
      c.num_hidden_layers = layers;
      c.torch_dtype = DType::kFloat32;
      name = (q ? "qwen3-0.6b-shape x" : "llama3.2-1b-shape x") + std::to_string(layers);
      if (b == 0) b = 2;
    } else {
      c = Check(llama::LlamaPreset(m), "preset");
      if (m == "1b") {
        c.num_hidden_layers = layers_1b;
        if (b == 0) b = 1;
        name = "1b-shape x" + std::to_string(layers_1b) + " layers";
      }
      c.tie_word_embeddings = false;
    }
    if (b == 0) b = 4;
    results.push_back(
        RunModel(name, c, b, seq, steps, rounds, static_cast<int>(threads), script, chunk));
  }
  double ratio = 1e300, frac = 1e300;
  nlohmann::json out = {{"threads", threads}, {"seq", seq}, {"steps", steps}, {"rounds", rounds}};
  for (const ModelResult& r : results) {
    const double q = r.strata_tokens_per_s / r.torch_tokens_per_s;
    ratio = std::min(ratio, q);
    frac = std::min(frac, r.gemm_fraction);
    out["models"].push_back({{"name", r.name},
                             {"params", r.params},
                             {"batch", r.batch},
                             {"strata_tokens_per_s", r.strata_tokens_per_s},
                             {"torch_tokens_per_s", r.torch_tokens_per_s},
                             {"strata_over_torch", q},
                             {"gemm_fraction", r.gemm_fraction},
                             {"gemm_gflops", r.gemm_gflops},
                             {"lm_head_rows_per_chunk", r.head_rows},
                             {"strata_head_bytes", r.strata_head_bytes},
                             {"torch_whole_logits_bytes", r.torch_logits_bytes},
                             {"strata_step_peak_bytes", r.strata_step_peak_bytes},
                             {"torch_step_peak_rss_bytes", r.torch_step_peak_bytes}});
    if (!json) {
      std::printf(
          "%-22s %6.1fM params, batch %lld x %lld: strata %8.1f tok/s, torch %8.1f tok/s, "
          "ratio %.2fx, GEMM %.0f%% of the step (%.1f GFLOP/s)\n",
          r.name.c_str(), static_cast<double>(r.params) / 1e6, static_cast<long long>(r.batch),
          static_cast<long long>(seq), r.strata_tokens_per_s, r.torch_tokens_per_s, q,
          100 * r.gemm_fraction, r.gemm_gflops);
      std::printf(
          "%-22s LM head: strata %.1f MiB (chunks of %lld tokens) vs torch whole logits %.1f MiB; "
          "step peak: strata device %.1f MiB, torch RSS growth %.1f MiB\n",
          "", static_cast<double>(r.strata_head_bytes) / 1048576.0,
          static_cast<long long>(r.head_rows),
          static_cast<double>(r.torch_logits_bytes) / 1048576.0,
          static_cast<double>(r.strata_step_peak_bytes) / 1048576.0,
          static_cast<double>(r.torch_step_peak_bytes) / 1048576.0);
    }
  }
  out["strata_over_torch"] = ratio;
  out["gemm_fraction"] = frac;
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
