#include "bench/scale/size_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "bench/overlap/bound_parts.h"
#include "bench/overlap/engine_run.h"
#include "bench/scale/mixed_io.h"
#include "engine/plan/run_memory.h"

namespace strata::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Bytes of the regular files under `dir` (the NVMe state as written).
uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// Hard links to the largest swap files of `dir` until they hold `bytes`, in `links` (the same
// files, so the sweep reads what the step reads; Note [Scale bound]), and to the others in
// `rest` (Note [Mixed traffic] in mixed_io.cc). The bytes linked in `links`.
Result<uint64_t> LinkSweepFiles(const std::string& dir, const std::string& links,
                                const std::string& rest, uint64_t bytes) {
  std::vector<std::pair<uint64_t, fs::path>> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().string().rfind(links, 0) != 0 &&
        e.path().string().rfind(rest, 0) != 0) {
      files.emplace_back(e.file_size(ec), e.path());
    }
  }
  std::sort(files.rbegin(), files.rend());
  fs::create_directories(links, ec);
  if (ec) return InternalError("cannot create " + links + ": " + ec.message());
  fs::create_directories(rest, ec);
  if (ec) return InternalError("cannot create " + rest + ": " + ec.message());
  uint64_t linked = 0;
  int n = 0;
  for (const auto& [size, path] : files) {
    const fs::path to = fs::path(linked < bytes ? links : rest) / ("f" + std::to_string(n++));
    if (::link(path.c_str(), to.c_str()) != 0) {
      return ErrnoToStatus(errno, "link " + path.string() + " -> " + to.string());
    }
    if (to.parent_path() == fs::path(links)) linked += size;
  }
  if (linked == 0) return NotFoundError("no swap files under " + dir);
  return linked;
}

// Forward + backward of the whole model measured alone, from resident models of one and two
// layers at the same width (the layers are identical): T(L) = T(1) + (L - 1)(T(2) - T(1)).
Result<double> ComputeAlone(const llama::LlamaConfig& model, DType dtype,
                            const nn::TokenBatch& batch, double* cpu_s) {
  double t[2] = {0, 0}, c[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    llama::LlamaConfig m = model;
    m.num_hidden_layers = k + 1;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ResidentCompute> rc,
                            ResidentCompute::Create(m, dtype, 7));
    STRATA_RETURN_IF_ERROR(rc->Run(batch).status());  // warm-up
    std::vector<double> s, cs;
    for (int r = 0; r < 3; ++r) {
      STRATA_ASSIGN_OR_RETURN(double x, rc->Run(batch));
      s.push_back(x);
      cs.push_back(rc->last_cpu_s());
    }
    t[k] = Median(s);
    c[k] = Median(cs);
  }
  const double layers = static_cast<double>(model.num_hidden_layers);
  *cpu_s = c[0] + (layers - 1) * std::max(0.0, c[1] - c[0]);
  return t[0] + (layers - 1) * std::max(0.0, t[1] - t[0]);
}

}  // namespace

llama::LlamaConfig ScaleModel(int64_t layers, bool quick) {
  llama::LlamaConfig mc;
  mc.hidden_size = quick ? 64 : 2048;
  mc.intermediate_size = quick ? 128 : 5632;
  mc.num_attention_heads = quick ? 4 : 32;
  mc.num_key_value_heads = quick ? 2 : 4;
  mc.vocab_size = quick ? 512 : 32000;
  mc.num_hidden_layers = layers;
  return mc;
}

std::string ScaleConfigJson(const ScaleOptions& o, const std::string& dir, uint64_t device_bytes) {
  // The budget is RAM: on the host-emulated device its arena is RAM too, so the engine plans
  // its CPU tiers within what the device leaves (0: no budget, for the plan-only calls).
  const uint64_t cpu_memory = o.cpu_budget > device_bytes ? o.cpu_budget - device_bytes : 0;
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
              {"offload_param",
               {{"device", "nvme"},
                {"nvme_path", dir},
                {"max_in_cpu", o.max_in_cpu},
                {"buffer_count", o.param_buffers},
                {"buffer_size", o.param_buffer_size}}},
              {"offload_optimizer",
               {{"device", "nvme"},
                {"nvme_path", dir},
                {"buffer_count", o.opt_buffers},
                {"pipeline_read", true},
                {"pipeline_write", true}}}}},
            {"strata",
             {{"device_memory", device_bytes},
              {"link_gbps", o.link_gbps},
              {"pinned_memory_limit", o.cpu_budget},
              {"cpu_memory", cpu_memory}}}};
  if (o.dtype == "bf16") c["bf16"] = {{"enabled", true}};
  if (!o.trace.empty()) {
    c["strata"]["trace_path"] = o.trace;
  }
  return c.dump();
}

// Note [Scale bound]
// The step's honest bound is the larger of what its NVMe traffic and its CPU work need, each
// measured alone in this process after the timed steps: the NVMe bytes the engine counted in the
// last step over the read / write speed Strata's own aio reaches on the same swap files (hard
// links to the largest of them, up to ScaleOptions::sweep_bytes, read in sub-group-sized
// requests, then overwritten with as many bytes once the engine is gone: Note [A sustained
// sweep] in bench/overlap/bound_parts.cc); the CPU work is forward +
// backward of resident models (one and two layers, extrapolated: the layers are identical), CPU
// Adam over a sub-group timed and scaled to the partition (it is element-wise), and the CPU time
// of the link copies at this host's memcpy speed; the paced link's own time is a third
// candidate. Peak RSS is read before any of this, so the bound's buffers do not count.
json RunScaleSize(const ScaleOptions& o, const llama::LlamaConfig& mc, const std::string& dir) {
  json out;
  out["layers"] = mc.num_hidden_layers;
  out["params"] = mc.NumParameters();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return {{"error", "cannot create " + dir + ": " + ec.message()}};
  RunContext rc;
  rc.hidden_size = mc.hidden_size;
  auto plan_for = [&](uint64_t device_bytes) -> Result<MemoryPlan> {
    STRATA_ASSIGN_OR_RETURN(Config c,
                            LoadConfigText(ScaleConfigJson(o, dir, device_bytes), "scale", rc));
    return PlanLlamaRun(mc, c, o.seq);
  };
  Result<MemoryPlan> p0 = plan_for(uint64_t{1} << 30);
  if (!p0.ok()) return {{"error", "plan: " + p0.status().message()}};
  const uint64_t device_bytes =
      (p0->bytes(PlanTier::kDevice) * 11 / 10 + (uint64_t{64} << 20)) / 4096 * 4096;

  if (device_bytes >= o.cpu_budget) {
    return {{"error", "the emulated device alone (" + std::to_string(device_bytes) +
                          " bytes) takes the whole CPU budget (" + std::to_string(o.cpu_budget) +
                          " bytes): raise --cpu-budget"}};
  }
  out["cpu_memory_bytes"] = o.cpu_budget - device_bytes;  // strata.cpu_memory
  TierBudget budget({TierBudget::kUnlimited, o.cpu_budget, TierBudget::kUnlimited});
  EngineRunOptions eo;
  eo.name = "scale";
  eo.model = mc;
  eo.seq_len = o.seq;
  eo.budget = &budget;
  eo.config_json = ScaleConfigJson(o, dir, device_bytes);
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<EngineRun>> rr = EngineRun::Create(eo);
  if (!rr.ok()) {
    out["refused"] = rr.status().ToString();
    out["peak_rss_bytes"] = PeakRssBytes();
    fs::remove_all(dir, ec);
    return out;
  }
  std::unique_ptr<EngineRun> run = std::move(rr).value();
  out["init_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Where the peak comes from (a diagnostic): the peak RSS (VmHWM) by the end of initialization
  // (the NVMe state written), and after each step (peak_rss_step_bytes).
  out["peak_rss_init_bytes"] = PeakRssBytes();

  const std::vector<int32_t> ids = RandomTokens(static_cast<size_t>(o.seq), mc.vocab_size, 5);
  const nn::TokenBatch batch{ids, ids, 1, o.seq};
  std::vector<double> losses, step_s;
  StepBreakdown last;
  for (int64_t s = 1; s <= o.steps; ++s) {
    Result<EngineStepResult> r = run->Step(batch);
    if (!r.ok()) {
      out["error"] = "step " + std::to_string(s) + ": " + r.status().ToString();
      fs::remove_all(dir, ec);
      return out;
    }
    losses.push_back(r->loss);
    step_s.push_back(r->total_s);
    out["peak_rss_step_bytes"].push_back(PeakRssBytes());
    last = r->breakdown;
  }
  if (Status s = run->engine().Synchronize(); !s.ok()) return {{"error", s.ToString()}};
  const uint64_t peak_rss = PeakRssBytes();  // before the bound's own buffers
  const uint64_t nvme_state = DirBytes(dir);

  // The bound (Note [Scale bound]).
  const size_t numel = static_cast<size_t>(mc.NumParameters());
  const size_t request = static_cast<size_t>(std::min<int64_t>(o.sub_group_size, 1 << 24)) * 4;
  const std::string links = (fs::path(dir) / "sweep-links").string();
  const std::string rest = (fs::path(dir) / "mixed-links").string();
  Result<uint64_t> linked = LinkSweepFiles(dir, links, rest, o.sweep_bytes);
  if (!linked.ok()) return {{"error", linked.status().ToString()}};
  const AioOptions aio = run->config().aio;
  run.reset();  // its files closed (the links keep them) and its memory back
  // Note [A sustained sweep] in bench/overlap/bound_parts.cc: the write pass overwrites the
  // linked files, as many bytes as were read.
  Result<AioSpeed> speed =
      MeasureAioSweep(links, aio, request, UINT64_MAX, {}, SweepWrites::kInPlace);
  if (!speed.ok()) return {{"error", "aio sweep: " + speed.status().ToString()}};
  fs::remove_all(links, ec);
  // Note [Mixed traffic] in mixed_io.cc: the step's reads and writes together, on the swap files
  // the sweep left alone (none when it took them all).
  const uint64_t rest_bytes = DirBytes(rest);
  Result<MixedIo> mixed =
      MeasureMixedIo(rest, aio, request, last.nvme_read_bytes, last.nvme_write_bytes);
  fs::remove_all(rest, ec);
  if (!mixed.ok() && mixed.status().code() != StatusCode::kNotFound) {
    return {{"error", mixed.status().ToString()}};
  }
  if (!mixed.ok()) mixed = MixedIo{};
  const DType dtype = o.dtype == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  fs::remove_all(dir, ec);
  double compute_cpu_s = 0;
  Result<double> compute_s = ComputeAlone(mc, dtype, batch, &compute_cpu_s);
  if (!compute_s.ok()) return {{"error", "compute alone: " + compute_s.status().ToString()}};
  const size_t chunk = std::min<size_t>({numel, static_cast<size_t>(o.sub_group_size), 1 << 25});
  Result<std::unique_ptr<AdamAlone>> adam = AdamAlone::Create(chunk, chunk);
  if (!adam.ok()) return {{"error", "adam alone: " + adam.status().ToString()}};
  (void)(*adam)->Run();
  std::vector<double> ta;
  for (int r = 0; r < 3; ++r) {
    Result<double> t = (*adam)->Run();
    if (!t.ok()) return {{"error", "adam alone: " + t.status().ToString()}};
    ta.push_back(*t);
  }
  const double adam_s = Median(ta) * static_cast<double>(numel) / static_cast<double>(chunk);
  const double memcpy_gbps = MeasureMemcpyGbps();
  const double copies_s =
      static_cast<double>(last.h2d_bytes + last.d2h_bytes) / (memcpy_gbps * 1e9);
  const double nvme_s = static_cast<double>(last.nvme_read_bytes) / (speed->read_gbps * 1e9) +
                        static_cast<double>(last.nvme_write_bytes) / (speed->write_gbps * 1e9);
  const double link_s =
      o.link_gbps > 0
          ? static_cast<double>(std::max(last.h2d_bytes, last.d2h_bytes)) / (o.link_gbps * 1e9)
          : 0.0;
  const double cpu_work = *compute_s + adam_s + copies_s;
  double bound = cpu_work;
  std::string formed_by = "cpu work alone (forward + backward + adam + copies' cpu time)";
  if (nvme_s > bound) bound = nvme_s, formed_by = "nvme bytes / strata aio read+write speed";
  if (link_s > bound) bound = link_s, formed_by = "link bytes / link speed";
  // The first step records the stage-3 trace and fills the pipeline: the steady steps follow.
  const std::vector<double> steady(step_s.size() > 1 ? step_s.begin() + 1 : step_s.begin(),
                                   step_s.end());
  const double step = Median(steady);

  out["nvme_state_bytes"] = nvme_state;
  out["losses"] = losses;
  out["loss_went_down"] = losses.size() >= 2 && losses.back() < losses.front();
  out["step_s"] = step_s;
  out["steady_step_s"] = step;
  out["peak_rss_bytes"] = peak_rss;
  out["pinned_peak_bytes"] = budget.Stats(Tier::kCpu).peak_bytes;
  out["device_memory_bytes"] = device_bytes;
  out["nvme_read_bytes_per_step"] = last.nvme_read_bytes;
  out["nvme_write_bytes_per_step"] = last.nvme_write_bytes;
  out["bound_s"] = bound;
  out["bound_formed_by"] = formed_by;
  out["step_over_bound"] = bound > 0 ? step / bound : 0.0;
  // Diagnostics (Note [Mixed traffic]): the step's NVMe bytes at the disk's speed with reads and
  // writes sharing it, against the step and against the bound's separate passes.
  const double mixed_s = mixed->gbps() > 0
                             ? static_cast<double>(last.nvme_read_bytes + last.nvme_write_bytes) /
                                   (mixed->gbps() * 1e9)
                             : 0.0;
  out["mixed_io_s"] = mixed_s;
  out["step_over_mixed_io"] = mixed_s > 0 ? step / mixed_s : 0.0;
  out["mixed_io_over_nvme_bound"] = nvme_s > 0 ? mixed_s / nvme_s : 0.0;
  out["mixed_io_parts"] = {
      {"files_bytes", rest_bytes},
      {"read_bytes", mixed->read_bytes},
      {"write_bytes", mixed->write_bytes},
      {"seconds", mixed->seconds},
      {"gbps", mixed->gbps()},
      {"from",
       "the step's reads and writes issued together, in its proportion, on the "
       "swap files the bound's sweep left alone (0 when it took them all; "
       "Note [Mixed traffic] in bench/scale/mixed_io.cc)"}};
  out["bound_parts"] = {
      {"nvme_s", nvme_s},
      {"aio_read_gbps", speed->read_gbps},
      {"aio_write_gbps", speed->write_gbps},
      {"aio_sweep_bytes", *linked},
      {"aio_request_bytes", request},
      {"aio", speed->engine},
      {"compute_s", *compute_s},
      {"compute_from", "resident 1- and 2-layer models, extrapolated"},
      {"adam_s", adam_s},
      {"adam_from", "one " + std::to_string(chunk) + "-element sub-group, scaled"},
      {"copies_cpu_s", copies_s},
      {"memcpy_gbps", memcpy_gbps},
      {"link_s", link_s},
      {"cpu_work_s", cpu_work}};
  return out;
}

}  // namespace strata::bench
