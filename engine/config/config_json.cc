#include "engine/config/config_json.h"

#include <algorithm>
#include <cstdio>

namespace strata {
namespace {

Json Paths(const std::vector<std::string>& paths) {
  Json a = Json::array();
  for (const auto& p : paths) a.push_back(p);
  return a;
}

Json NvmePaths(const std::vector<std::string>& paths) {
  if (paths.empty()) return nullptr;
  if (paths.size() == 1) return paths[0];
  return Paths(paths);
}

Json OptimizerJson(const OptimizerConfig& o) {
  Json params = Json::object();
  params["lr"] = o.lr;
  if (o.type != OptimizerType::kAdagrad) params["betas"] = Json::array({o.beta1, o.beta2});
  if (o.type != OptimizerType::kLion) params["eps"] = o.eps;
  params["weight_decay"] = o.weight_decay;
  if (o.type == OptimizerType::kAdam || o.type == OptimizerType::kAdamW) {
    params["adam_w_mode"] = o.adam_w_mode;
    params["bias_correction"] = o.bias_correction;
    params["torch_adam"] = o.torch_adam;
  }
  return Json{{"type", OptimizerTypeName(o.type)}, {"params", params}};
}

Json SchedulerJson(const SchedulerConfig& s) {
  if (s.type == SchedulerType::kNone) return nullptr;
  Json p = Json::object();
  auto total = [&] { return s.total_num_steps ? Json(*s.total_num_steps) : Json(nullptr); };
  switch (s.type) {
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR:
      if (s.type == SchedulerType::kWarmupDecayLR) p["total_num_steps"] = total();
      p["warmup_min_lr"] = s.warmup_min_lr;
      p["warmup_max_lr"] = s.warmup_max_lr;
      p["warmup_num_steps"] = s.warmup_num_steps;
      p["warmup_type"] = s.warmup_type;
      break;
    case SchedulerType::kWarmupCosineLR:
      p["total_num_steps"] = total();
      p["warmup_min_ratio"] = s.warmup_min_ratio;
      p["warmup_num_steps"] = s.warmup_num_steps;
      p["cos_min_ratio"] = s.cos_min_ratio;
      p["warmup_type"] = s.warmup_type;
      break;
    case SchedulerType::kOneCycle:
      p["cycle_min_lr"] = s.cycle_min_lr;
      p["cycle_max_lr"] = s.cycle_max_lr;
      p["decay_lr_rate"] = s.decay_lr_rate;
      p["cycle_first_step_size"] = s.cycle_first_step_size;
      p["cycle_second_step_size"] = s.cycle_second_step_size;
      p["cycle_first_stair_count"] = s.cycle_first_stair_count;
      p["cycle_second_stair_count"] = s.cycle_second_stair_count;
      p["decay_step_size"] = s.decay_step_size;
      p["cycle_momentum"] = s.cycle_momentum;
      p["cycle_min_mom"] = s.cycle_min_mom;
      p["cycle_max_mom"] = s.cycle_max_mom;
      p["decay_mom_rate"] = s.decay_mom_rate;
      break;
    case SchedulerType::kLRRangeTest:
      p["lr_range_test_min_lr"] = s.lr_range_test_min_lr;
      p["lr_range_test_step_size"] = s.lr_range_test_step_size;
      p["lr_range_test_step_rate"] = s.lr_range_test_step_rate;
      p["lr_range_test_staircase"] = s.lr_range_test_staircase;
      break;
    case SchedulerType::kNone:
      break;
  }
  p["last_batch_iteration"] = s.last_batch_iteration;
  return Json{{"type", SchedulerTypeName(s.type)}, {"params", p}};
}

Json ZeroJson(const ZeroConfig& z) {
  const auto& op = z.offload_param;
  const auto& oo = z.offload_optimizer;
  return Json{
      {"stage", z.stage},
      {"contiguous_gradients", z.contiguous_gradients},
      {"overlap_comm", z.overlap_comm},
      {"reduce_scatter", z.reduce_scatter},
      {"reduce_bucket_size", z.reduce_bucket_size},
      {"allgather_partitions", z.allgather_partitions},
      {"allgather_bucket_size", z.allgather_bucket_size},
      {"round_robin_gradients", z.round_robin_gradients},
      {"sub_group_size", z.sub_group_size},
      {"stage3_prefetch_bucket_size", z.prefetch_bucket_size},
      {"stage3_param_persistence_threshold", z.param_persistence_threshold},
      {"stage3_model_persistence_threshold", z.model_persistence_threshold},
      {"stage3_max_live_parameters", z.max_live_parameters},
      {"stage3_max_reuse_distance", z.max_reuse_distance},
      {"stage3_gather_16bit_weights_on_model_save", z.gather_16bit_weights_on_model_save},
      {"offload_param", Json{{"device", OffloadDeviceName(op.device)},
                             {"nvme_path", NvmePaths(op.nvme_paths)},
                             {"pin_memory", op.pin_memory},
                             {"buffer_count", op.buffer_count},
                             {"buffer_size", op.buffer_size},
                             {"max_in_cpu", op.max_in_cpu}}},
      {"offload_optimizer", Json{{"device", OffloadDeviceName(oo.device)},
                                 {"nvme_path", NvmePaths(oo.nvme_paths)},
                                 {"pin_memory", oo.pin_memory},
                                 {"buffer_count", oo.buffer_count},
                                 {"pipeline_read", oo.pipeline_read},
                                 {"pipeline_write", oo.pipeline_write},
                                 {"fast_init", oo.fast_init},
                                 {"ratio", oo.ratio}}},
  };
}

// Leaves of `j` as (path, value) in document order.
void Flatten(const Json& j, const std::string& path,
             std::vector<std::pair<std::string, Json>>* out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) Flatten(v, JoinPath(path, k), out);
  } else {
    out->emplace_back(path, j);
  }
}

}  // namespace

Json ConfigToJson(const Config& c) {
  Json j = Json::object();
  j["train_batch_size"] = c.batch.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.batch.micro_batch_per_gpu;
  j["gradient_accumulation_steps"] = c.batch.gradient_accumulation_steps;
  j["gradient_clipping"] = c.training.gradient_clipping;
  j["prescale_gradients"] = c.training.prescale_gradients;
  j["gradient_predivide_factor"] = c.training.gradient_predivide_factor;
  j["steps_per_print"] = c.training.steps_per_print;
  j["wall_clock_breakdown"] = c.training.wall_clock_breakdown;
  j["optimizer"] = OptimizerJson(c.optimizer);
  j["scheduler"] = SchedulerJson(c.scheduler);
  const Fp16Config& f = c.fp16;
  j["fp16"] = Json{{"enabled", f.enabled},
                   {"auto_cast", f.auto_cast},
                   {"loss_scale", f.loss_scale},
                   {"initial_scale_power", f.initial_scale_power},
                   {"loss_scale_window", f.loss_scale_window},
                   {"hysteresis", f.hysteresis},
                   {"consecutive_hysteresis", f.consecutive_hysteresis},
                   {"min_loss_scale", f.min_loss_scale}};
  j["bf16"] = Json{{"enabled", c.bf16.enabled},
                   {"immediate_grad_update", c.bf16.immediate_grad_update},
                   {"check_grad_overflow", c.bf16.check_grad_overflow}};
  j["zero_optimization"] = ZeroJson(c.zero);
  const auto& a = c.activation_checkpointing;
  j["activation_checkpointing"] =
      Json{{"partition_activations", a.partition_activations},
           {"contiguous_memory_optimization", a.contiguous_memory_optimization},
           {"cpu_checkpointing", a.cpu_checkpointing},
           {"number_checkpoints", a.number_checkpoints ? Json(*a.number_checkpoints) : Json()},
           {"synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary},
           {"profile", a.profile}};
  j["aio"] = Json{{"block_size", c.aio.block_size},
                  {"queue_depth", c.aio.queue_depth},
                  {"intra_op_parallelism", c.aio.thread_count},
                  {"single_submit", c.aio.single_submit},
                  {"overlap_events", c.aio.overlap_events},
                  {"use_gds", false}};
  const StrataConfig& s = c.strata;
  j["strata"] = Json{
      {"aio_engine", IoEngineKindName(c.aio.engine)},
      {"aio_allow_buffered", c.aio.allow_buffered},
      {"aio_sqpoll", c.aio.sqpoll},
      {"swap_checksums", s.swap_checksums},
      {"unknown_keys", s.unknown_keys_error ? "error" : "warn"},
      {"comm_backend", CommBackendName(s.comm_backend)},
      {"comm_timeout_s", s.comm_timeout_s},
      {"device", DeviceChoiceName(s.device)},
      {"device_memory", s.device_memory_bytes},
      {"link_gbps", s.link_gbps},
      {"trace_path", s.trace_path},
      {"overlap_step", s.overlap_step},
      {"deferred_updates", s.deferred_updates},
      {"pinned_memory_limit", s.pinned_memory_limit_bytes},
      {"cpu_memory", s.cpu_memory_bytes},
      {"lm_head_chunk",
       s.lm_head_chunk == StrataConfig::kLmHeadChunkAuto ? Json("auto") : Json(s.lm_head_chunk)},
      {"swap_chunk_bytes", s.swap_chunk_auto ? Json("auto") : Json(s.swap_chunk_bytes)}};
  return j;
}

std::string FormatConfigView(const Config& c) {
  std::string out;
  const ConfigReport& r = c.report;
  if (r.ErrorCount() == 0) {
    std::vector<std::pair<std::string, Json>> leaves;
    Flatten(ConfigToJson(c), "", &leaves);
    size_t width = 0;
    for (const auto& [p, v] : leaves) width = std::max(width, p.size());
    out += "resolved config (world size " + std::to_string(c.batch.world_size) + "):\n";
    for (const auto& [p, v] : leaves) {
      std::string value = v.is_null() && p == "scheduler" ? "none" : v.dump();
      char line[512];
      std::snprintf(line, sizeof(line), "  %-*s = %-14s  %s\n", static_cast<int>(width), p.c_str(),
                    value.c_str(), r.DescribeOrigin(p).c_str());
      out += line;
    }
  }
  for (Severity sev : {Severity::kNote, Severity::kWarning, Severity::kError}) {
    for (const auto& d : r.diagnostics) {
      if (d.severity == sev) out += FormatDiagnostic(d, r.source) + "\n";
    }
  }
  out +=
      r.source + ": " +
      (r.ErrorCount() ? std::to_string(r.ErrorCount()) + " error(s), " : std::string("valid, ")) +
      std::to_string(r.Count(Severity::kWarning)) + " warning(s), " +
      std::to_string(r.Count(Severity::kNote)) + " note(s)\n";
  return out;
}

}  // namespace strata
