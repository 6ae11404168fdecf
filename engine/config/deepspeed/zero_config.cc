#include "engine/config/deepspeed/zero_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>
#include <utility>

namespace strata {

bool ZeroConfig::IsAuto(std::string_view path) const {
  return std::find(auto_sizes.begin(), auto_sizes.end(), path) != auto_sizes.end();
}

std::string_view OffloadDeviceName(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

namespace internal {
namespace {

constexpr const char* kZ = "zero_optimization";

// Keys DeepSpeed's schema has that Strata accepts and does not use (no effect on the math).
const std::vector<std::string_view> kUnusedKeys = {"use_multi_rank_bucket_allreduce",
                                                   "load_from_fp32_weights",
                                                   "elastic_checkpoint",
                                                   "ignore_unused_parameters",
                                                   "legacy_stage1",
                                                   "zero_hpz_partition_size",
                                                   "zeropp_loco_param",
                                                   "mics_shard_size",
                                                   "mics_hierarchical_params_gather",
                                                   "memory_efficient_linear",
                                                   "pipeline_loading_checkpoint",
                                                   "override_module_apply",
                                                   "log_trace_cache_warnings",
                                                   "enable_sanity_checks",
                                                   "save_muon_momentum_buffer_in_memory",
                                                   "leaf_module",
                                                   "stage3_module_granularity_threshold",
                                                   "module_granularity_threshold",
                                                   "stage3_use_all_reduce_for_fetch_params",
                                                   "use_all_reduce_for_fetch_params",
                                                   "stage3_allgather_sequential",
                                                   "allgather_sequential",
                                                   "stage3_partition_stream_chunk_size",
                                                   "partition_stream_chunk_size"};

// Keys that change the math when on (quantized ZeRO++, ZenFlow's stale updates).
const std::vector<std::string_view> kMathKeys = {
    "zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients"};

// A stage-3 key with DeepSpeed's two spellings (pydantic alias): `canonical` is what the
// resolved config prints.
struct Aliased {
  const char* canonical;
  const char* alias;
};

// Reads whichever spelling is present (both: an error); origins go under the canonical path.
Got ReadAliasedInt(const Section& s, Aliased k, int64_t* out, bool auto_ok) {
  ConfigContext* ctx = s.ctx();
  if (s.Has(k.canonical) && s.Has(k.alias)) {
    ctx->Error(s.KeyPath(k.alias), std::string("both '") + k.canonical + "' and '" + k.alias +
                                       "' are given (the same setting); keep one");
    return Got::kInvalid;
  }
  if (s.Has(k.alias)) {
    Got g = s.Int(k.alias, out, 0, Section::kMaxInt, auto_ok);
    if (g == Got::kValue) {
      ctx->SetOrigin(s.KeyPath(k.canonical), OriginKind::kFile,
                     std::string("as '") + k.alias + "'");
    } else if (g == Got::kAuto) {
      ctx->SetOrigin(s.KeyPath(k.canonical), OriginKind::kAuto, "default");
    }
    return g;
  }
  return s.Int(k.canonical, out, 0, Section::kMaxInt, auto_ok);
}

// "auto" keys the Hugging Face integration derives from the model's hidden size.
void ResolveHidden(const Section& s, Got g, const char* key, double factor, int power, int64_t* out,
                   ZeroConfig* z) {
  if (g != Got::kAuto) return;
  ConfigContext* ctx = s.ctx();
  z->auto_sizes.push_back(s.KeyPath(key));
  const auto& h = ctx->run().hidden_size;
  if (h) {
    double v = factor * std::pow(static_cast<double>(*h), power);
    *out = static_cast<int64_t>(v);
    std::string how = power == 2 ? (factor == 1.0 ? "hidden²" : "0.9·hidden²") : "10·hidden";
    ctx->SetOrigin(s.KeyPath(key), OriginKind::kAuto,
                   how + " = " + std::to_string(*out) + " (hidden " + std::to_string(*h) +
                       "; Hugging Face's rule)");
  } else {
    ctx->SetOrigin(
        s.KeyPath(key), OriginKind::kAuto,
        "DeepSpeed's default " + std::to_string(*out) + " (no model hidden size given; with one: " +
            std::string(power == 2 ? (factor == 1.0 ? "hidden²" : "0.9·hidden²") : "10·hidden") +
            ", Hugging Face's rule)");
  }
}

// A sizing key written "auto" that no hidden-size rule covers: the planner's choice, for now
// DeepSpeed's default (`*out` as the caller left it) for the reason `why`.
void ResolveDefault(const Section& s, Got g, const char* key, const int64_t* out, ZeroConfig* z,
                    const std::string& why = "") {
  if (g != Got::kAuto) return;
  z->auto_sizes.push_back(s.KeyPath(key));
  s.ctx()->SetOrigin(
      s.KeyPath(key), OriginKind::kAuto,
      "DeepSpeed's default " + std::to_string(*out) + (why.empty() ? "" : "; ") + why);
}

void ReadNvmePaths(const Section& s, std::vector<std::string>* out) {
  ConfigContext* ctx = s.ctx();
  const Json* v = s.Get("nvme_path");
  const std::string p = s.KeyPath("nvme_path");
  if (!v || v->is_null()) return;
  if (v->is_string() && !v->get_ref<const std::string&>().empty()) {
    out->push_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty()) {
    for (const auto& e : *v) {
      if (!e.is_string() || e.get_ref<const std::string&>().empty()) {
        ctx->Error(p, "must be a path or a list of paths, got " + v->dump());
        out->clear();
        return;
      }
      out->push_back(e.get<std::string>());
    }
  } else {
    ctx->Error(p, "must be a path or a list of paths, got " + v->dump());
    return;
  }
  ctx->SetOrigin(p, OriginKind::kFile);
}

OffloadDevice ReadDevice(const Section& s) {
  std::string d = "none";
  s.Enum("device", &d, {"none", "cpu", "nvme"});
  return d == "cpu"    ? OffloadDevice::kCpu
         : d == "nvme" ? OffloadDevice::kNvme
                       : OffloadDevice::kNone;
}

// DeepSpeed's schema takes 0 buffers (ge=0); they only matter to an NVMe swap, which needs one.
void CheckNvmeBuffers(const Section& s, OffloadDevice device,
                      std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  if (device != OffloadDevice::kNvme) return;
  for (const auto& [key, value] : sizes) {
    if (value == 0) {
      s.ctx()->Error(s.KeyPath(key),
                     "= 0 with device \"nvme\": the swap needs at least one "
                     "buffer of at least one element; must be >= 1 (or \"auto\")");
    }
  }
}

void CheckNvmePath(const Section& s, OffloadDevice device, const std::vector<std::string>& paths) {
  if (device == OffloadDevice::kNvme && paths.empty() && !s.Has("nvme_path")) {
    s.ctx()->Error(s.KeyPath("nvme_path"),
                   "missing: device \"nvme\" needs a path (or a list of "
                   "paths) on the NVMe drive");
  } else if (device != OffloadDevice::kNvme && !paths.empty()) {
    s.ctx()->Note(s.KeyPath("nvme_path"), "ignored: the device is not \"nvme\"");
  }
}

void ReadOffloadParam(const Section& z, OffloadParamConfig* o, ZeroConfig* zc) {
  Section s = z.Object("offload_param");
  s.CheckKeys({"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"},
              {{"pipeline_read", "an offload_optimizer key"},
               {"pipeline_write", "an offload_optimizer key"},
               {"fast_init", "an offload_optimizer key"},
               {"ratio", "an offload_optimizer key"}});
  o->device = ReadDevice(s);
  ReadNvmePaths(s, &o->nvme_paths);
  s.Bool("pin_memory", &o->pin_memory);
  ResolveDefault(s, s.Int("buffer_count", &o->buffer_count, 0, Section::kMaxInt, true),
                 "buffer_count", &o->buffer_count, zc);
  ResolveDefault(s, s.Int("buffer_size", &o->buffer_size, 0, Section::kMaxInt, true), "buffer_size",
                 &o->buffer_size, zc,
                 "raised at start-up to the largest parameter shard when one is larger "
                 "(a buffer holds a whole shard)");
  ResolveDefault(s, s.Int("max_in_cpu", &o->max_in_cpu, 0, Section::kMaxInt, true), "max_in_cpu",
                 &o->max_in_cpu, zc);
  CheckNvmeBuffers(s, o->device,
                   {{"buffer_count", o->buffer_count}, {"buffer_size", o->buffer_size}});
  if (s.present()) CheckNvmePath(s, o->device, o->nvme_paths);
}

void ReadOffloadOptimizer(const Section& z, OffloadOptimizerConfig* o, ZeroConfig* zc) {
  Section s = z.Object("offload_optimizer");
  s.CheckKeys(
      {"device", "nvme_path", "pin_memory", "buffer_count", "pipeline_read", "pipeline_write",
       "fast_init", "ratio", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"},
      {{"buffer_size",
        "an offload_param key (optimizer buffers are sized by the "
        "sub-group)"},
       {"max_in_cpu", "an offload_param key"}});
  o->device = ReadDevice(s);
  ReadNvmePaths(s, &o->nvme_paths);
  s.Bool("pin_memory", &o->pin_memory);
  ResolveDefault(s, s.Int("buffer_count", &o->buffer_count, 0, Section::kMaxInt, true),
                 "buffer_count", &o->buffer_count, zc);
  s.Bool("pipeline_read", &o->pipeline_read);
  s.Bool("pipeline_write", &o->pipeline_write);
  s.Bool("fast_init", &o->fast_init);
  if (s.Double("ratio", &o->ratio) == Got::kValue && !(o->ratio > 0.0 && o->ratio <= 1.0)) {
    std::ostringstream v;
    v << o->ratio;
    s.ctx()->Error(s.KeyPath("ratio"), "= " + v.str() +
                                           " is out of range: must be in (0, 1] (the fraction of "
                                           "the optimizer state stepped on the CPU)");
  }
  for (const char* k : {"super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"}) {
    if (s.Has(k)) s.ctx()->Note(s.KeyPath(k), "accepted, not used by Strata");
  }
  CheckNvmeBuffers(s, o->device, {{"buffer_count", o->buffer_count}});
  if (s.present()) CheckNvmePath(s, o->device, o->nvme_paths);
}

// cpu_offload / cpu_offload_param(s) / cpu_offload_use_pin_memory: DeepSpeed's old keys.
void ReadDeprecatedOffload(const Section& z, ZeroConfig* out) {
  ConfigContext* ctx = z.ctx();
  struct Old {
    const char* key;
    const char* target;
  };
  for (Old old :
       {Old{"cpu_offload", "offload_optimizer"}, Old{"cpu_offload_param", "offload_param"},
        Old{"cpu_offload_params", "offload_param"}}) {
    bool on = false;
    if (z.Bool(old.key, &on) != Got::kValue) continue;
    const std::string dev_path = z.KeyPath(old.target) + ".device";
    if (z.Has(old.target)) {
      ctx->Error(z.KeyPath(old.key), std::string("and '") + old.target + "' are both given; '" +
                                         old.key + "' is the old form: keep '" + old.target + "'");
      continue;
    }
    ctx->Warning(z.KeyPath(old.key), std::string("deprecated; read as ") + old.target +
                                         ".device = \"" + (on ? "cpu" : "none") + "\"");
    if (on) {
      if (old.target == std::string("offload_optimizer")) {
        out->offload_optimizer.device = OffloadDevice::kCpu;
      } else {
        out->offload_param.device = OffloadDevice::kCpu;
      }
    }
    ctx->SetOrigin(dev_path, OriginKind::kDeprecated,
                   std::string(old.key) + " = " + (on ? "true" : "false"));
  }
  bool pin = true;
  if (z.Bool("cpu_offload_use_pin_memory", &pin) == Got::kValue) {
    ctx->Warning(z.KeyPath("cpu_offload_use_pin_memory"),
                 "deprecated and ignored (as in DeepSpeed); set pin_memory in offload_param / "
                 "offload_optimizer");
  }
}

}  // namespace

void ReadZero(const Section& top, ZeroConfig* out) {
  ConfigContext* ctx = top.ctx();
  const Json* zj = top.Get(kZ);
  if (zj && zj->is_boolean()) {
    out->stage = zj->get<bool>() ? 1 : 0;
    ctx->Warning(kZ, std::string("\"zero_optimization\": ") + (zj->get<bool>() ? "true" : "false") +
                         " is DeepSpeed's old form; read as {\"stage\": " +
                         std::to_string(out->stage) + "}");
    ctx->SetOrigin("zero_optimization.stage", OriginKind::kDeprecated,
                   std::string("zero_optimization = ") + (zj->get<bool>() ? "true" : "false"));
    if (out->stage > 0) {
      if (top.Int("allgather_size", &out->allgather_bucket_size, 0) == Got::kValue) {
        ctx->SetOrigin("zero_optimization.allgather_bucket_size", OriginKind::kDeprecated,
                       "allgather_size");
      }
    }
    out->overlap_comm = false;
    return;
  }
  Section z = top.Object(kZ);
  std::vector<std::string_view> known = {"stage",
                                         "contiguous_gradients",
                                         "overlap_comm",
                                         "reduce_scatter",
                                         "reduce_bucket_size",
                                         "allgather_partitions",
                                         "allgather_bucket_size",
                                         "round_robin_gradients",
                                         "sub_group_size",
                                         "stage3_prefetch_bucket_size",
                                         "prefetch_bucket_size",
                                         "stage3_param_persistence_threshold",
                                         "param_persistence_threshold",
                                         "stage3_model_persistence_threshold",
                                         "model_persistence_threshold",
                                         "stage3_max_live_parameters",
                                         "max_live_parameters",
                                         "stage3_max_reuse_distance",
                                         "max_reuse_distance",
                                         "stage3_gather_16bit_weights_on_model_save",
                                         "gather_16bit_weights_on_model_save",
                                         "stage3_gather_fp16_weights_on_model_save",
                                         "offload_param",
                                         "offload_optimizer",
                                         "cpu_offload",
                                         "cpu_offload_param",
                                         "cpu_offload_params",
                                         "cpu_offload_use_pin_memory",
                                         "zenflow"};
  known.insert(known.end(), kUnusedKeys.begin(), kUnusedKeys.end());
  known.insert(known.end(), kMathKeys.begin(), kMathKeys.end());
  z.CheckKeys(known, {{"aio",
                       "'aio' is a top-level section, not part of zero_optimization "
                       "(DeepSpeed ignores it here)"}});

  if (z.Int("stage", &out->stage, 0, 3) == Got::kAbsent) {
    ctx->SetOrigin("zero_optimization.stage", OriginKind::kDefault, "ZeRO off");
  }
  z.Bool("contiguous_gradients", &out->contiguous_gradients);
  out->overlap_comm = out->stage == 3;
  if (z.Bool("overlap_comm", &out->overlap_comm) == Got::kAbsent) {
    ctx->SetOrigin("zero_optimization.overlap_comm", OriginKind::kDefault,
                   "true for stage 3, else false");
  }
  z.Bool("reduce_scatter", &out->reduce_scatter);
  ResolveHidden(z, z.Int("reduce_bucket_size", &out->reduce_bucket_size, 0, Section::kMaxInt, true),
                "reduce_bucket_size", 1.0, 2, &out->reduce_bucket_size, out);
  z.Bool("allgather_partitions", &out->allgather_partitions);
  ResolveDefault(
      z, z.Int("allgather_bucket_size", &out->allgather_bucket_size, 0, Section::kMaxInt, true),
      "allgather_bucket_size", &out->allgather_bucket_size, out);
  z.Bool("round_robin_gradients", &out->round_robin_gradients);
  // 0 is DeepSpeed's "one parameter per sub-group" (a group closes once it holds >= 0 elements).
  const Got sub = z.Int("sub_group_size", &out->sub_group_size, 0, Section::kMaxInt, true);
  ResolveDefault(z, sub, "sub_group_size", &out->sub_group_size, out);
  if (sub == Got::kValue && out->sub_group_size == 0) {
    ctx->SetOrigin(z.KeyPath("sub_group_size"), OriginKind::kFile,
                   "0: one parameter per sub-group, as in DeepSpeed");
  }

  ResolveHidden(z,
                ReadAliasedInt(z, {"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
                               &out->prefetch_bucket_size, true),
                "stage3_prefetch_bucket_size", 0.9, 2, &out->prefetch_bucket_size, out);
  ResolveHidden(
      z,
      ReadAliasedInt(z, {"stage3_param_persistence_threshold", "param_persistence_threshold"},
                     &out->param_persistence_threshold, true),
      "stage3_param_persistence_threshold", 10.0, 1, &out->param_persistence_threshold, out);
  ResolveDefault(
      z,
      ReadAliasedInt(z, {"stage3_model_persistence_threshold", "model_persistence_threshold"},
                     &out->model_persistence_threshold, true),
      "stage3_model_persistence_threshold", &out->model_persistence_threshold, out, "no cap");
  ResolveDefault(z,
                 ReadAliasedInt(z, {"stage3_max_live_parameters", "max_live_parameters"},
                                &out->max_live_parameters, true),
                 "stage3_max_live_parameters", &out->max_live_parameters, out);
  ResolveDefault(z,
                 ReadAliasedInt(z, {"stage3_max_reuse_distance", "max_reuse_distance"},
                                &out->max_reuse_distance, true),
                 "stage3_max_reuse_distance", &out->max_reuse_distance, out);

  // Three spellings of one flag; the fp16 one is deprecated.
  const char* gather_keys[] = {"stage3_gather_16bit_weights_on_model_save",
                               "gather_16bit_weights_on_model_save",
                               "stage3_gather_fp16_weights_on_model_save"};
  int given = 0;
  for (const char* k : gather_keys) given += z.Has(k) ? 1 : 0;
  if (given > 1) {
    ctx->Error(z.KeyPath("stage3_gather_16bit_weights_on_model_save"),
               "given under more than one name (stage3_gather_16bit_weights_on_model_save, "
               "gather_16bit_weights_on_model_save, stage3_gather_fp16_weights_on_model_save); "
               "keep one");
  } else {
    const std::string canon = z.KeyPath(gather_keys[0]);
    for (const char* k : gather_keys) {
      if (!z.Has(k)) continue;
      Got g = z.Bool(k, &out->gather_16bit_weights_on_model_save, /*auto_ok=*/true);
      if (k == gather_keys[2]) {
        ctx->Warning(z.KeyPath(k), "deprecated; read as stage3_gather_16bit_weights_on_model_save");
        if (g == Got::kValue) ctx->SetOrigin(canon, OriginKind::kDeprecated, k);
      } else if (k == gather_keys[1] && g == Got::kValue) {
        ctx->SetOrigin(canon, OriginKind::kFile, std::string("as '") + k + "'");
      }
      if (g == Got::kAuto) ctx->SetOrigin(canon, OriginKind::kAuto, "false (default)");
    }
  }

  ReadOffloadParam(z, &out->offload_param, out);
  ReadOffloadOptimizer(z, &out->offload_optimizer, out);
  ReadDeprecatedOffload(z, out);

  for (auto k : kUnusedKeys) {
    if (z.Has(k)) ctx->Note(z.KeyPath(k), "accepted, not used by Strata (no effect on the math)");
  }
  for (auto k : kMathKeys) {
    bool on = false;
    if (z.Bool(k, &on) == Got::kValue && on) {
      ctx->Error(z.KeyPath(k),
                 "= true quantizes what ZeRO communicates, which changes the math; "
                 "Strata does not implement ZeRO++ quantization");
    }
  }
  if (z.Has("zenflow")) {
    ctx->Error(z.KeyPath("zenflow"),
               "ZenFlow applies stale updates to unimportant gradients, "
               "which changes the math; Strata does not implement it");
  }

  // Cross-key rules (DeepSpeed's where it has them).
  auto& op = out->offload_param;
  const auto& oo = out->offload_optimizer;
  if (op.device != OffloadDevice::kNone && out->stage != 3) {
    // DeepSpeed reads offload_param only at stage 3 and ignores it below.
    ctx->Warning("zero_optimization.offload_param.device",
                 "= \"" + std::string(OffloadDeviceName(op.device)) + "\" has no effect at stage " +
                     std::to_string(out->stage) +
                     " (parameters are partitioned and offloaded only at stage 3; DeepSpeed "
                     "ignores it too): read as \"none\"");
    ctx->SetOrigin("zero_optimization.offload_param.device", OriginKind::kDerived,
                   "\"none\": offload_param has no effect below stage 3");
    op.device = OffloadDevice::kNone;
  }
  if (oo.device != OffloadDevice::kNone && out->stage == 0) {
    ctx->Error("zero_optimization.offload_optimizer.device",
               "= \"" + std::string(OffloadDeviceName(oo.device)) +
                   "\" needs ZeRO stage 1, 2 or 3; stage is 0");
  }
  if (oo.device == OffloadDevice::kNvme && (out->stage == 1 || out->stage == 2)) {
    // DeepSpeed offers NVMe only at stage 3 (ZeRO-Infinity); Strata's engine swaps the
    // optimizer state per sub-group the same way at stages 1 and 2.
    ctx->Warning("zero_optimization.offload_optimizer.device",
                 "= \"nvme\" at stage " + std::to_string(out->stage) +
                     ": Strata runs it; DeepSpeed only accepts it at stage 3");
  }
  if (oo.ratio > 0.0 && oo.ratio < 1.0) {
    // DeepSpeed takes it at stage 3 only; Strata splits the optimizer state by sub-group the
    // same way at stages 1-3 (engine/optim/partial_offload.h).
    if (out->stage != 3 && oo.device == OffloadDevice::kCpu) {
      ctx->Warning("zero_optimization.offload_optimizer.ratio",
                   "< 1 at stage " + std::to_string(out->stage) +
                       ": Strata runs it; DeepSpeed only accepts it at stage 3");
    }
    if (oo.device == OffloadDevice::kNvme) {
      ctx->Error("zero_optimization.offload_optimizer.ratio",
                 "< 1 (partial offload) cannot be used with device \"nvme\" "
                 "(zero_optimization.offload_optimizer.device; the whole optimizer state is "
                 "swapped): use device \"cpu\" or ratio 1");
    }
    if (oo.device == OffloadDevice::kNone) {
      ctx->Warning("zero_optimization.offload_optimizer.ratio",
                   "has no effect without offload_optimizer.device");
    }
  }
  if ((oo.pipeline_read || oo.pipeline_write) && oo.device != OffloadDevice::kNvme) {
    ctx->Warning("zero_optimization.offload_optimizer.pipeline_read",
                 "pipeline_read/pipeline_write only apply to device \"nvme\"; ignored");
  }
}

}  // namespace internal
}  // namespace strata
