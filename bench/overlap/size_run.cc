#include "bench/overlap/size_run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <tbb/global_control.h>

#include "bench/overlap/bound_parts.h"
#include "bench/overlap/busy_cores_floor.h"
#include "bench/overlap/engine_run.h"
#include "bench/overlap/phase_floor.h"

namespace strata::bench {
namespace {

using nlohmann::json;

// Note [The work parts' minimum]
// The bound's and the floor's CPU parts (compute alone with its forward, Adam alone) are work no
// schedule avoids, so what disturbs their runs only adds to them: their minimum over the rounds
// is the estimate. Until the twelfth session of 2026-12-01 they were the median, and on that
// session's machine the Adam part (33.7M elements) took 0.014-0.06 s in most rounds and 0.12-0.26
// s in others, its process CPU time then twice its wall time (both cores busy: work, not a
// wait); in 6 of 13 runs of `overlap --json --rounds 3` the median of some size took such a value
// and its floor rose to or above the very step it bounds (overlapped_over_phase_floor 0.60-1.00):
// a target met by a measuring fault. The per-round values are in the JSON (bound_parts.rounds).
// The steps and the aio speeds stay medians: they are what the figures report, and the disk's
// speed moves both ways.
// Note [Warm work parts]
// Each round times the second of two back-to-back runs of compute alone and of Adam alone. On the
// fourteenth session's machine (AMD EPYC, AVX-512) the Adam part took 0.17-0.29 s a round, both
// cores busy in the kernel (cpu_seconds.adam_by_thread), while the same loop over the same 33.7M
// elements in a process of its own took 11 ms a step from its second step on, and the overlapped
// step's own updates 47-99 ms a step in all (breakdown_overlapped.overlapped_adam_ms): run once
// after the other parts, the kernel read its 0.5 GiB from memory the sweeps and the engines had
// just taken out of the caches, while the step updates states its reads have just brought in. So
// the floor's Adam term was 2-4x what the step spends, and in 12 of 24 size-runs that session the
// floor came out above the step it bounds (overlapped_over_phase_floor 0.67-0.97). A lower bound
// takes the work at its fastest: warm.

// The second of two runs of `run` with oneTBB held to one thread: the part's CPU work without its
// threads' idle spinning (Note [Busy cores floor] in busy_cores_floor.cc).
template <typename F>
Result<double> OnOneCore(F run) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  STRATA_RETURN_IF_ERROR(run().status());  // Note [Warm work parts]
  return run();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Schedule {
  bool overlapped = true;
  std::string param_device = "nvme";
};

// The largest module's parameters: a decoder layer's or the embedding's.
int64_t LargestModuleNumel(const llama::LlamaConfig& m) {
  const int64_t h = m.hidden_size, kv = m.num_key_value_heads * m.head_dim();
  const int64_t layer = 2 * h * h + 2 * h * kv + 3 * h * m.intermediate_size;
  return std::max(layer, m.vocab_size * h);
}

// Note [NVMe minimum]
// What a step of this placement must move, with every parameter streamed (max_in_cpu 0): each
// parameter shard read once per pass (forward and backward: the device holds about two modules,
// so none stays from one pass to the other), the optimizer state (fp32 master, exp_avg,
// exp_avg_sq) read and written once, the updated shard written once, and the fp32 gradients
// written to their NVMe region and read back by the step once (strata.nvme_grad_chunk, on by
// default). Above it: shards read twice in a pass (evicted between two uses), state or gradient
// chunks written and read back (buffers too few), rolled-back updates redone. Below it: what
// the coordinator kept on the device from one pass to the next.
nlohmann::json NvmeMinimumJson(const SizeOptions& o, const StepBreakdown& b) {
  const uint64_t p = static_cast<uint64_t>(o.model.NumParameters()), cb = 4;  // fp32 params
  const uint64_t shard_reads = 2 * p * cb, state = 2 * 12 * p, shard_write = p * cb;
  const uint64_t grads = 2 * p * 4;
  const uint64_t minimum = shard_reads + state + shard_write + grads;
  const uint64_t measured = b.nvme_read_bytes + b.nvme_write_bytes;
  return {{"minimum_bytes", minimum},
          {"measured_bytes", measured},
          {"measured_over_minimum",
           minimum > 0 ? static_cast<double>(measured) / static_cast<double>(minimum) : 0.0},
          {"parts",
           {{"shard_reads_fwd_bwd", shard_reads},
            {"optimizer_state_read_write", state},
            {"updated_shard_write", shard_write},
            {"gradient_region_write_read", grads}}},
          {"note",
           "each shard read once per pass, the optimizer state read and written once, the "
           "updated shard written once, the gradients through their region once (Note [NVMe "
           "minimum] in bench/overlap/size_run.cc)"}};
}

// The DeepSpeed config of one schedule. Overlapped: the coordinator prefetches (a bucket of the
// largest module), the optimizer overlaps backward, the swapper pipelines its reads and writes,
// reduce-scatters run on the comm stream. Serial: none of these, so fetch, compute and step
// happen strictly in sequence. Both: at most two of the largest modules live, reduce buckets of
// one, so the device holds a few modules at a time whatever the model's depth.
std::string ConfigJson(const SizeOptions& o, const Schedule& s, uint64_t device_bytes,
                       const std::string& swap_dir) {
  const int64_t module = LargestModuleNumel(o.model);
  json param = {{"device", s.param_device}};
  if (s.param_device == "nvme") param["nvme_path"] = swap_dir;
  if (s.param_device == "nvme" && o.max_in_cpu >= 0) param["max_in_cpu"] = o.max_in_cpu;
  if (s.param_device == "nvme" && o.param_buffer_size >= 0) {
    param["buffer_size"] = o.param_buffer_size;
  }
  json zero = {{"stage", 3},
               {"sub_group_size", o.sub_group_size},
               {"overlap_comm", s.overlapped},
               {"stage3_prefetch_bucket_size", s.overlapped ? module : 0},
               {"stage3_max_live_parameters", 2 * module},
               {"reduce_bucket_size", module},
               {"allgather_bucket_size", module},
               {"offload_param", param},
               {"offload_optimizer",
                {{"device", "nvme"},
                 {"nvme_path", swap_dir},
                 {"buffer_count", o.buffer_count},
                 {"pipeline_read", s.overlapped},
                 {"pipeline_write", s.overlapped}}}};
  json c = {{"train_micro_batch_size_per_gpu", o.batch},
            {"gradient_accumulation_steps", 1},
            {"gradient_clipping", o.clip},
            {"steps_per_print", 1000000},
            {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}, {"weight_decay", 0.01}}}}},
            {"zero_optimization", zero},
            {"strata",
             {{"device_memory", device_bytes},
              {"link_gbps", o.link_gbps},
              {"overlap_step", s.overlapped},
              {"swap_checksums", o.checksums},
              {"deferred_updates", o.deferred_updates}}},
            {"aio", {{"queue_depth", o.aio_queue_depth}, {"block_size", o.aio_block_size}}}};
  if (s.overlapped && !o.trace.empty()) c["strata"]["trace_path"] = o.trace;
  if (o.nvme_grad_chunk >= 0) c["strata"]["nvme_grad_chunk"] = o.nvme_grad_chunk;
  if (o.swap_chunk_bytes >= 0) c["strata"]["swap_chunk_bytes"] = o.swap_chunk_bytes;
  return c.dump();
}

// The device memory for this size: params + optimizer state / state_over_device, but never less
// than the plan needs (activations included) with 10% to spare; the JSON says which.
Result<uint64_t> DeviceBytes(const SizeOptions& o, bool* raised) {
  const uint64_t state = ModelAndOptimizerBytes(o.model, DType::kFloat32);
  const uint64_t want = static_cast<uint64_t>(static_cast<double>(state) / o.state_over_device);
  RunContext run;
  run.world_size = 1;
  run.hidden_size = o.model.hidden_size;
  STRATA_ASSIGN_OR_RETURN(Config c,
                          LoadConfigText(ConfigJson(o, {true, "nvme"}, want, "/tmp"), "plan", run));
  STRATA_ASSIGN_OR_RETURN(MemoryPlan plan, PlanLlamaRun(o.model, c, o.seq));
  const uint64_t need = plan.bytes(PlanTier::kDevice) * 11 / 10 + (uint64_t{4} << 20);
  *raised = need > want;
  return std::max(want, need) / 4096 * 4096 + 4096;
}

Result<std::unique_ptr<EngineRun>> MakeRun(const SizeOptions& o, const Schedule& s,
                                           uint64_t device_bytes, const std::string& dir) {
  std::filesystem::create_directories(dir);
  EngineRunOptions eo;
  eo.name = s.overlapped ? "overlapped" : "serial";
  eo.model = o.model;
  eo.seq_len = o.seq;
  eo.config_json = ConfigJson(o, s, device_bytes, dir);
  return EngineRun::Create(eo);
}

json PartsJson(double compute, double adam, double copies_cpu, double nvme, double link) {
  return {{"compute_s", compute},
          {"adam_s", adam},
          {"copies_cpu_s", copies_cpu},
          {"cpu_work_s", compute + adam + copies_cpu},
          {"nvme_s", nvme},
          {"link_s", link}};
}

}  // namespace

Result<json> RunSize(const SizeOptions& o) {
  namespace fs = std::filesystem;
  bool raised = false;
  STRATA_ASSIGN_OR_RETURN(const uint64_t device_bytes, DeviceBytes(o, &raised));
  const fs::path base = fs::path(o.dir) / o.name;
  const std::string odir = (base / "overlapped").string(), sdir = (base / "serial").string();

  // Parameters on NVMe when the engine has it, else on pinned CPU memory (and the JSON says so).
  Schedule sched_o{true, "nvme"}, sched_s{false, "nvme"};
  std::string param_note = "nvme";
  Result<std::unique_ptr<EngineRun>> ro = MakeRun(o, sched_o, device_bytes, odir);
  if (!ro.ok() && ro.status().code() == StatusCode::kUnimplemented) {
    param_note = "cpu (offload_param nvme refused: " + ro.status().message() + ")";
    sched_o.param_device = sched_s.param_device = "cpu";
    ro = MakeRun(o, sched_o, device_bytes, odir);
  }
  STRATA_RETURN_IF_ERROR(ro.status());
  std::unique_ptr<EngineRun> run_o = std::move(ro).value();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EngineRun> run_s,
                          MakeRun(o, sched_s, device_bytes, sdir));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ResidentCompute> compute,
                          ResidentCompute::Create(o.model, DType::kFloat32, 7));
  const size_t numel = static_cast<size_t>(o.model.NumParameters());
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<AdamAlone> adam,
                          AdamAlone::Create(numel, static_cast<size_t>(o.sub_group_size)));

  const std::vector<int32_t> ids =
      RandomTokens(static_cast<size_t>(o.batch * o.seq), o.model.vocab_size, 99);
  const nn::TokenBatch batch{ids, ids, o.batch, o.seq};
  const AioOptions aio = run_o->config().aio;
  const size_t request = static_cast<size_t>(std::min<int64_t>(o.sub_group_size, numel)) * 4;

  // Warm-up: buffers, page faults, the BLAS pool, the coordinator's first (recording) step.
  STRATA_RETURN_IF_ERROR(run_o->Step(batch).status());
  STRATA_RETURN_IF_ERROR(run_s->Step(batch).status());
  STRATA_RETURN_IF_ERROR(compute->Run(batch).status());
  STRATA_RETURN_IF_ERROR(adam->Run().status());

  std::vector<double> t_over, t_serial, t_compute, t_forward, t_adam, rd_gbps, wr_gbps;
  std::vector<double> rd_loaded, wr_loaded, t_compute_loaded;  // Note [A loaded sweep]
  std::vector<double> rd_spin, wr_spin;           // Note [A sweep beside idle spinners]
  std::vector<double> t_compute_one, t_adam_one;  // on one core (Note [Busy cores floor])
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int spinners_idle = cores;
  std::vector<double> cpu_over, cpu_compute, cpu_adam;  // the process's CPU seconds, all threads
  std::map<std::string, ThreadCpu> thread_cpu_over;     // summed over the timed overlapped steps
  std::map<std::string, ThreadCpu> thread_cpu_compute;  // summed over the compute-alone runs
  std::map<std::string, ThreadCpu> thread_cpu_adam;     // summed over the Adam-alone runs
  std::vector<float> losses;
  EngineStepResult last_o, last_s;
  std::vector<StepBreakdown> breakdowns_o;  // every timed overlapped step's (Note [Median bytes])
  AioSpeed speed;
  for (int64_t r = 0; r < o.rounds; ++r) {
    // ABBA: even rounds overlapped first, odd rounds serial first (and the parts in reverse).
    const bool fwd = r % 2 == 0;
    for (int k = 0; k < 7; ++k) {
      const int part = fwd ? k : 6 - k;
      if (part == 0) {
        STRATA_ASSIGN_OR_RETURN(std::vector<EngineStepResult> steps,
                                run_o->SteadySteps(batch, o.steps));
        for (const EngineStepResult& st : steps) {
          t_over.push_back(st.total_s);
          cpu_over.push_back(st.cpu_s);
          AddThreadCpu(st.threads, &thread_cpu_over);
          breakdowns_o.push_back(st.breakdown);
        }
        last_o = steps.back();
        losses.push_back(last_o.loss);
      } else if (part == 1) {
        STRATA_ASSIGN_OR_RETURN(std::vector<EngineStepResult> steps,
                                run_s->SteadySteps(batch, o.steps));
        for (const EngineStepResult& st : steps) t_serial.push_back(st.total_s);
        last_s = steps.back();
      } else if (part == 2) {
        STRATA_RETURN_IF_ERROR(compute->Run(batch).status());  // Note [Warm work parts]
        const std::map<int, ThreadCpu> threads0 = ThreadCpuSeconds();
        STRATA_ASSIGN_OR_RETURN(double s, compute->Run(batch));
        AddThreadCpu(ThreadCpuDelta(threads0, ThreadCpuSeconds()), &thread_cpu_compute);
        t_compute.push_back(s);
        t_forward.push_back(compute->last_forward_s());
        cpu_compute.push_back(compute->last_cpu_s());
        STRATA_ASSIGN_OR_RETURN(t_compute_one.emplace_back(),
                                OnOneCore([&] { return compute->Run(batch); }));
      } else if (part == 3) {
        STRATA_RETURN_IF_ERROR(adam->Run().status());  // Note [Warm work parts]
        const std::map<int, ThreadCpu> threads0 = ThreadCpuSeconds();
        STRATA_ASSIGN_OR_RETURN(double s, adam->Run());
        AddThreadCpu(ThreadCpuDelta(threads0, ThreadCpuSeconds()), &thread_cpu_adam);
        t_adam.push_back(s);
        cpu_adam.push_back(adam->last_cpu_s());
        STRATA_ASSIGN_OR_RETURN(t_adam_one.emplace_back(), OnOneCore([&] { return adam->Run(); }));
      } else if (part == 4) {
        STRATA_ASSIGN_OR_RETURN(speed, MeasureAioSweep(odir, aio, request, o.sweep_write_bytes));
        rd_gbps.push_back(speed.read_gbps);
        wr_gbps.push_back(speed.write_gbps);
      } else if (part == 6) {
        IdleSpinners spin(cores);
        spinners_idle = std::min(spinners_idle, spin.idle_threads());
        STRATA_ASSIGN_OR_RETURN(AioSpeed beside,
                                MeasureAioSweep(odir, aio, request, o.sweep_write_bytes));
        rd_spin.push_back(beside.read_gbps);
        wr_spin.push_back(beside.write_gbps);
      } else {
        auto load = [&]() -> Status {
          STRATA_ASSIGN_OR_RETURN(double s, compute->Run(batch));
          t_compute_loaded.push_back(s);
          return Status::Ok();
        };
        STRATA_ASSIGN_OR_RETURN(AioSpeed loaded,
                                MeasureAioSweep(odir, aio, request, o.sweep_write_bytes, load));
        rd_loaded.push_back(loaded.read_gbps);
        wr_loaded.push_back(loaded.write_gbps);
      }
    }
    if (o.verbose) {
      std::fprintf(stderr,
                   "  %s round %lld: overlapped %.3f s, serial %.3f s, compute %.3f s, adam "
                   "%.3f s, aio r %.2f w %.2f GB/s\n",
                   o.name.c_str(), static_cast<long long>(r), t_over.back(), t_serial.back(),
                   t_compute.back(), t_adam.back(), rd_gbps.back(), wr_gbps.back());
    }
  }

  // The bound, from the parts (Note [The work parts' minimum]) and the overlapped step's own byte
  // counts.
  // Note [Median bytes]: a step's NVMe bytes move with which states it finds resident (up to 50%
  // between runs of one config), so the bytes every floor and bound take are one timed step's
  // whole breakdown, the step whose NVMe bytes are the median of all timed steps' (the lower
  // middle of an even count), not the last step's; the JSON gives their range.
  std::vector<size_t> by_bytes(breakdowns_o.size());
  for (size_t i = 0; i < by_bytes.size(); ++i) by_bytes[i] = i;
  auto nvme_bytes = [&](size_t i) {
    return breakdowns_o[i].nvme_read_bytes + breakdowns_o[i].nvme_write_bytes;
  };
  std::sort(by_bytes.begin(), by_bytes.end(),
            [&](size_t x, size_t y) { return nvme_bytes(x) < nvme_bytes(y); });
  const StepBreakdown& b = breakdowns_o[by_bytes[(by_bytes.size() - 1) / 2]];
  const size_t best_compute =
      static_cast<size_t>(std::min_element(t_compute.begin(), t_compute.end()) - t_compute.begin());
  const double compute_s = t_compute[best_compute];
  const double adam_s = *std::min_element(t_adam.begin(), t_adam.end());
  const double copies_cpu_s =
      o.memcpy_gbps > 0 ? static_cast<double>(b.h2d_bytes + b.d2h_bytes) / (o.memcpy_gbps * 1e9)
                        : 0.0;
  const double rd = Median(rd_gbps), wr = Median(wr_gbps);
  const double nvme_s = static_cast<double>(b.nvme_read_bytes) / (rd * 1e9) +
                        static_cast<double>(b.nvme_write_bytes) / (wr * 1e9);
  const double link_s = o.link_gbps > 0 ? static_cast<double>(std::max(b.h2d_bytes, b.d2h_bytes)) /
                                              (o.link_gbps * 1e9)
                                        : 0.0;
  const double cpu_work = compute_s + adam_s + copies_cpu_s;
  double bound = cpu_work;
  std::string formed_by = "cpu work (compute + adam + copies' cpu time)";
  if (nvme_s > bound) bound = nvme_s, formed_by = "nvme bytes / aio read+write speed";
  if (link_s > bound) bound = link_s, formed_by = "link bytes / link speed";
  const double over = Median(t_over), ser = Median(t_serial);

  // Note [Phase floor] in phase_floor.cc: the same parts with the forward / backward order kept.
  const double forward_s = t_forward[best_compute];  // the forward of the same run
  const uint64_t fwd_h2d = std::min(b.forward_h2d_bytes, b.h2d_bytes);
  const uint64_t bwd_h2d = b.h2d_bytes - fwd_h2d;
  auto per_s = [](uint64_t bytes, double gbps) {
    return gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e9) : 0.0;
  };
  const PhaseWork fwd_phase{forward_s, per_s(fwd_h2d, o.memcpy_gbps), per_s(fwd_h2d, o.link_gbps)};
  const PhaseWork bwd_phase{std::max(0.0, compute_s - forward_s),
                            per_s(bwd_h2d + b.d2h_bytes, o.memcpy_gbps),
                            per_s(std::max(bwd_h2d, b.d2h_bytes), o.link_gbps)};
  const PhaseFloor floor = ComputePhaseFloor(fwd_phase, bwd_phase, adam_s, nvme_s);

  json j;
  j["seq"] = o.seq;
  j["gradient_clipping"] = o.clip;
  j["max_in_cpu"] = o.max_in_cpu;
  j["param_buffer_size"] = o.param_buffer_size;
  j["aio_sweep_write_bytes"] = o.sweep_write_bytes;
  j["swap_checksums"] = o.checksums;
  j["deferred_updates"] = o.deferred_updates;
  j["nvme_grad_chunk"] = o.nvme_grad_chunk;
  j["swap_chunk_bytes"] = o.swap_chunk_bytes;
  j["batch"] = o.batch;
  j["param_device"] = param_note;
  j["device_memory_bytes"] = device_bytes;
  // Allocation attempts the overlapped engine's device refused (each followed by a retry: the
  // gather pool's free buffers given back, the frees in flight waited for; Note [Room behind the
  // frees in flight] in engine/zero/hooks/pending_frees.cc). A run whose last retry found no block
  // failed before here.
  j["device_allocations_refused"] = run_o->device().MemoryStats().oom_count;
  j["state_bytes"] = ModelAndOptimizerBytes(o.model, DType::kFloat32);
  // The CPU memory the optimizer's state passes through (the budget every figure here depends
  // on: compare runs at the same bytes, not the same --buffer-count), from the overlapped
  // engine's memory plan, which rounds each buffer as the pinned pool does.
  uint64_t swap_buffers = 0;
  std::string swap_label;  // says the count, which "auto" chooses (Note [Auto swap chunks])
  for (const PlanItem& i : run_o->plan().items) {
    if (i.what.rfind("optimizer swap buffers", 0) == 0) {
      swap_buffers += i.bytes;
      swap_label = i.what;
    }
  }
  j["optimizer_swap_buffer_bytes"] = swap_buffers;
  j["optimizer_swap_buffers"] = swap_label;
  j["state_over_device"] =
      static_cast<double>(j["state_bytes"].get<uint64_t>()) / static_cast<double>(device_bytes);
  j["device_memory_raised_to_fit"] = raised;
  j["overlapped_s"] = over;
  j["serial_s"] = ser;
  j["overlapped_steps_s"] = t_over;
  j["serial_steps_s"] = t_serial;
  j["bound_s"] = bound;
  j["bound_formed_by"] = formed_by;
  j["bound_parts"] = PartsJson(compute_s, adam_s, copies_cpu_s, nvme_s, link_s);
  j["bound_parts"]["nvme_read_bytes"] = b.nvme_read_bytes;
  j["bound_parts"]["nvme_write_bytes"] = b.nvme_write_bytes;
  j["bound_parts"]["h2d_bytes"] = b.h2d_bytes;
  j["bound_parts"]["d2h_bytes"] = b.d2h_bytes;
  j["bound_parts"]["aio_read_gbps"] = rd;
  j["bound_parts"]["aio_write_gbps"] = wr;
  j["bound_parts"]["aio"] = speed.engine;
  // Note [Only the written extents] in bound_parts.cc: the sweep reads what the swap wrote.
  j["bound_parts"]["aio_sweep_read_bytes"] = speed.read_bytes;
  // Not part of the bound: the same sweep with the step's compute running beside it.
  const double rd_l = Median(rd_loaded), wr_l = Median(wr_loaded);
  j["aio_beside_compute"] = {
      {"read_gbps", rd_l},
      {"write_gbps", wr_l},
      {"nvme_s", static_cast<double>(b.nvme_read_bytes) / (rd_l * 1e9) +
                     static_cast<double>(b.nvme_write_bytes) / (wr_l * 1e9)},
      {"compute_s", Median(t_compute_loaded)},
      {"note",
       "not part of the bound: the aio sweep with forward + backward looping beside it "
       "(Note [A loaded sweep] in bench/overlap/bound_parts.cc)"}};
  j["aio_beside_compute"]["overlapped_over_nvme_s"] =
      over / std::max(1e-12, j["aio_beside_compute"]["nvme_s"].get<double>());
  const double rd_i = Median(rd_spin), wr_i = Median(wr_spin);
  const double nvme_spin_s = static_cast<double>(b.nvme_read_bytes) / (rd_i * 1e9) +
                             static_cast<double>(b.nvme_write_bytes) / (wr_i * 1e9);
  j["aio_beside_idle_spinners"] = {
      {"read_gbps", rd_i},
      {"write_gbps", wr_i},
      {"nvme_s", nvme_spin_s},
      {"overlapped_over_nvme_s", over / std::max(1e-12, nvme_spin_s)},
      {"spinners", cores},
      {"spinners_at_sched_idle", spinners_idle},
      {"rounds", {{"read_gbps", rd_spin}, {"write_gbps", wr_spin}}},
      {"note",
       "not part of the bound: the aio sweep beside one spinning thread per core at SCHED_IDLE, "
       "which takes no CPU time from the I/O path (Note [A sweep beside idle spinners] in "
       "bench/overlap/bound_parts.cc)"}};
  j["bound_parts"]["aio_request_bytes"] = request;
  j["bound_parts"]["estimator"] =
      "compute (with its forward) and adam: the minimum over rounds (Note [The work parts' "
      "minimum] in bench/overlap/size_run.cc); aio speeds and steps: the median over rounds";
  j["bound_parts"]["rounds"] = {{"compute_s", t_compute},
                                {"forward_s", t_forward},
                                {"adam_s", t_adam},
                                {"aio_read_gbps", rd_gbps},
                                {"aio_write_gbps", wr_gbps}};
  j["bound_parts"]["memcpy_gbps"] = o.memcpy_gbps;
  // Note [CPU seconds]: how busy the cores were during the overlapped step, against the CPU
  // seconds its measured work took alone (compute, Adam: their own runs' process CPU time;
  // copies: one core each, the bound's figure). On this 2-core machine a CPU-bound step that
  // keeps both cores busy and still exceeds cpu work spends the excess on what the bound leaves
  // out: the swap checksums, the gradient norm, the kernel's I/O path, the scheduler and idle
  // spinning of the oneTBB threads, and the slower GEMMs beside Adam and the copies (caches and
  // memory bandwidth shared).
  const double over_cpu = Median(cpu_over);
  const double work_cpu = Median(cpu_compute) + Median(cpu_adam) + copies_cpu_s;
  // The swap checksums (strata.swap_checksums, on by default): each byte read from or written to
  // NVMe hashed once, at the speed measured alone. Work the engine does by design, left out of
  // work_cpu_s and of the bound (whose cpu work is the model's, the optimizer's and the link's).
  const double checksums_cpu_s =
      o.checksums && o.checksum_gbps > 0
          ? static_cast<double>(b.nvme_read_bytes + b.nvme_write_bytes) / (o.checksum_gbps * 1e9)
          : 0.0;
  j["cpu_seconds"] = {
      {"cores", static_cast<double>(cores)},
      {"overlapped_cpu_s", over_cpu},
      {"overlapped_cores_busy", over > 0 ? over_cpu / (over * static_cast<double>(cores)) : 0.0},
      {"compute_cpu_s", Median(cpu_compute)},
      {"adam_cpu_s", Median(cpu_adam)},
      {"copies_cpu_s", copies_cpu_s},
      {"work_cpu_s", work_cpu},
      {"overlapped_over_work_cpu", work_cpu > 0 ? over_cpu / work_cpu : 0.0},
      {"checksums_cpu_s", checksums_cpu_s},
      {"checksums_note",
       "not in work_cpu_s nor the bound: swap_checksums hashing the step's NVMe "
       "bytes once, at checksum_gbps measured alone"}};
  // Per thread name, the mean per timed overlapped step (/proc's 10 ms ticks): which thread
  // spends the CPU seconds (the engine names its threads: strata-strm-N a device stream,
  // strata-aio-N an aio worker, strata-optim the overlapped step's worker, tbb-worker the oneTBB
  // pool, main the caller).
  // The mean per run of each thread's CPU seconds and switches; `quiet` drops the idle threads.
  const auto per_run = [](const std::map<std::string, ThreadCpu>& by_name, size_t count,
                          bool quiet) {
    const double n = static_cast<double>(std::max<size_t>(1, count));
    json out = json::object();
    for (const auto& [name, t] : by_name) {
      if (quiet && t.cpu_s == 0 && t.switches == 0) continue;
      out[name] = {{"cpu_s", t.cpu_s / n}, {"switches", t.switches / n}};
    }
    return out;
  };
  j["cpu_seconds"]["overlapped_by_thread"] = per_run(thread_cpu_over, t_over.size(), false);
  // The same for compute alone and Adam alone, per run.
  j["cpu_seconds"]["compute_by_thread"] = per_run(thread_cpu_compute, t_compute.size(), true);
  j["cpu_seconds"]["adam_by_thread"] = per_run(thread_cpu_adam, t_adam.size(), true);
  j["overlapped_over_bound"] = bound > 0 ? over / bound : 0.0;
  j["overlapped_over_nvme_s"] = nvme_s > 0 ? over / nvme_s : 0.0;
  if (o.max_in_cpu == 0) j["nvme_minimum"] = NvmeMinimumJson(o, b);
  j["phase_floor"] = PhaseFloorJson(fwd_phase, bwd_phase, adam_s, nvme_s, floor);
  j["phase_floor"]["forward_h2d_bytes"] = fwd_h2d;
  j["phase_floor_over_bound"] = bound > 0 ? floor.floor_s / bound : 0.0;
  j["overlapped_over_phase_floor"] = floor.floor_s > 0 ? over / floor.floor_s : 0.0;
  // Note [Busy cores floor] in busy_cores_floor.cc: the work's one-core seconds (the checksums
  // included: the config's, on by default) against the disk alone and beside busy cores.
  const double compute_one_s = *std::min_element(t_compute_one.begin(), t_compute_one.end());
  const double adam_one_s = *std::min_element(t_adam_one.begin(), t_adam_one.end());
  const BusyCoresParts busy_parts{compute_one_s + adam_one_s + copies_cpu_s + checksums_cpu_s,
                                  cores, nvme_s, nvme_spin_s};
  const BusyCoresFloor busy = ComputeBusyCoresFloor(busy_parts);
  const double floor_here = std::max(busy.floor_s, floor.floor_s);
  j["busy_cores_floor"] = BusyCoresFloorJson(busy_parts, busy);
  j["busy_cores_floor"]["work_parts"] = {
      {"compute_one_core_s", compute_one_s},
      {"adam_one_core_s", adam_one_s},
      {"copies_cpu_s", copies_cpu_s},
      {"checksums_cpu_s", checksums_cpu_s},
      {"rounds", {{"compute_one_core_s", t_compute_one}, {"adam_one_core_s", t_adam_one}}}};
  j["busy_cores_floor_over_phase_floor"] = floor.floor_s > 0 ? floor_here / floor.floor_s : 0.0;
  j["overlapped_over_busy_cores_floor"] = floor_here > 0 ? over / floor_here : 0.0;
  j["serial_over_overlapped"] = over > 0 ? ser / over : 0.0;
  j["losses_overlapped"] = losses;
  j["breakdown_overlapped"] = json::parse(b.ToJson());
  j["breakdown_overlapped_is"] = "the timed step of median NVMe bytes (Note [Median bytes])";
  j["nvme_bytes_per_step"] = {{"min", nvme_bytes(by_bytes.front())},
                              {"median", nvme_bytes(by_bytes[(by_bytes.size() - 1) / 2])},
                              {"max", nvme_bytes(by_bytes.back())},
                              {"steps", by_bytes.size()}};
  j["breakdown_serial"] = json::parse(last_s.breakdown.ToJson());

  run_o.reset();
  run_s.reset();
  std::error_code ec;
  fs::remove_all(base, ec);
  return j;
}

}  // namespace strata::bench
