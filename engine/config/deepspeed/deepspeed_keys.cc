#include "engine/config/deepspeed/deepspeed_keys.h"

#include <algorithm>
#include <map>
#include <string>

namespace strata::internal {
namespace {

enum class Rule {
  kNote,               // accepted, not used
  kErrorIfEnabled,     // "enabled": true changes the math
  kErrorIfAnyEnabled,  // any nested "enabled": true changes the math
  kErrorIfPresent,     // its presence changes the model
  kCustom,             // checked below
};

struct OtherKey {
  std::string_view key;
  Rule rule;
  std::string_view what;
};

// DeepSpeed's top-level keys (runtime/config.py and the configs it reads) outside Strata's.
const std::vector<OtherKey>& OtherKeys() {
  static const std::vector<OtherKey> keys = {
      {"amp", Rule::kErrorIfEnabled, "NVIDIA Apex AMP mixed precision"},
      {"torch_autocast", Rule::kErrorIfEnabled, "torch.autocast mixed precision"},
      {"compression_training", Rule::kErrorIfAnyEnabled,
       "compression (quantization, pruning) "
       "while training"},
      {"quantize_training", Rule::kErrorIfEnabled, "MoQ quantized training"},
      {"progressive_layer_drop", Rule::kErrorIfEnabled, "progressive layer dropping"},
      {"curriculum_learning", Rule::kErrorIfEnabled,
       "curriculum learning (sequence length "
       "schedule)"},
      {"data_efficiency", Rule::kErrorIfEnabled,
       "the data efficiency library (curriculum "
       "sampling, random-LTD)"},
      {"elasticity", Rule::kErrorIfEnabled, "elastic training (it rewrites the batch sizes)"},
      {"sparse_attention", Rule::kErrorIfPresent, "sparse attention (it changes the model)"},
      {"communication_data_type", Rule::kCustom, "gradient reduction precision"},
      {"gradient_allreduce_op", Rule::kCustom, "the gradient reduction"},
      {"data_types", Rule::kCustom, "gradient accumulation dtype"},
      {"tensor_parallel", Rule::kCustom, "tensor parallelism"},
      {"sequence_parallel_size", Rule::kCustom, "sequence parallelism"},
      {"pipeline", Rule::kNote, "pipeline parallelism (Strata has none)"},
      {"tensorboard", Rule::kNote, "TensorBoard monitor"},
      {"wandb", Rule::kNote, "Weights & Biases monitor"},
      {"csv_monitor", Rule::kNote, "CSV monitor"},
      {"comet", Rule::kNote, "Comet monitor"},
      {"flops_profiler", Rule::kNote, "FLOPS profiler"},
      {"comms_logger", Rule::kNote, "communication logger"},
      {"autotuning", Rule::kNote, "autotuner"},
      {"timers", Rule::kNote, "throughput timers"},
      {"nebula", Rule::kNote, "Nebula checkpointing service"},
      {"datastates", Rule::kNote, "DataStates checkpointing"},
      {"checkpoint", Rule::kNote, "checkpoint tag validation and writers"},
      {"compile", Rule::kNote, "torch.compile / DeepCompile"},
      {"weight_quantization", Rule::kNote, "inference weight quantization"},
      {"hybrid_engine", Rule::kNote, "RLHF hybrid engine"},
      {"expert_parallel", Rule::kNote, "mixture-of-experts parallelism"},
      {"zero_allow_untested_optimizer", Rule::kNote, "client optimizers under ZeRO"},
      {"zero_force_ds_cpu_optimizer", Rule::kNote,
       "DeepSpeed's CPU optimizer check (Strata "
       "always uses its own)"},
      {"dump_state", Rule::kNote, "state dump after initialization"},
      {"disable_allgather", Rule::kNote, "broadcast instead of all-gather"},
      {"seq_parallel_communication_data_type", Rule::kNote, "sequence-parallel reduction dtype"},
      {"sparse_gradients", Rule::kNote, "sparse embedding gradients"},
      {"memory_breakdown", Rule::kNote, "memory logging"},
      {"graph_harvesting", Rule::kNote, "CUDA graph capture"},
      {"dataloader_drop_last", Rule::kNote, "DeepSpeed's data loader"},
      {"log_level", Rule::kNote, "DeepSpeed's logger"},
      {"vocabulary_size", Rule::kNote, "tensor-core alignment warning"},
      {"use_data_before_expert_parallelism", Rule::kNote, "MoE process-group layout"},
      {"managed_gradient_accumulation", Rule::kNote, "client-driven accumulation boundaries"},
  };
  return keys;
}

// Keys that live inside a section, for "you put it at the top level" hints. Generic names
// ("enabled", "type", "params", "device") are left out: they fit too many places.
const std::map<std::string_view, std::string_view>& NestedKeys() {
  static const std::map<std::string_view, std::string_view> keys = [] {
    std::map<std::string_view, std::string_view> m;
    for (auto k : {"stage",
                   "contiguous_gradients",
                   "overlap_comm",
                   "reduce_scatter",
                   "reduce_bucket_size",
                   "allgather_partitions",
                   "allgather_bucket_size",
                   "round_robin_gradients",
                   "sub_group_size",
                   "stage3_prefetch_bucket_size",
                   "stage3_param_persistence_threshold",
                   "stage3_model_persistence_threshold",
                   "stage3_max_live_parameters",
                   "stage3_max_reuse_distance",
                   "stage3_gather_16bit_weights_on_model_save",
                   "gather_16bit_weights_on_model_save",
                   "offload_param",
                   "offload_optimizer",
                   "cpu_offload",
                   "cpu_offload_param",
                   "zero_quantized_weights",
                   "zero_quantized_gradients",
                   "zero_hpz_partition_size"}) {
      m[k] = "zero_optimization";
    }
    for (auto k : {"block_size", "queue_depth", "intra_op_parallelism", "thread_count",
                   "single_submit", "overlap_events", "use_gds"}) {
      m[k] = "aio";
    }
    for (auto k : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                   "consecutive_hysteresis", "min_loss_scale", "auto_cast"}) {
      m[k] = "fp16";
    }
    for (auto k : {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                   "number_checkpoints", "synchronize_checkpoint_boundary"}) {
      m[k] = "activation_checkpointing";
    }
    for (auto k : {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam"}) {
      m[k] = "optimizer.params";
    }
    for (auto k :
         {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps", "warmup_type"}) {
      m[k] = "scheduler.params";
    }
    for (auto k :
         {"aio_engine", "swap_checksums", "comm_backend", "device_memory", "link_gbps",
          "trace_path", "pinned_memory_limit", "unknown_keys", "swap_chunk_bytes", "cpu_memory"}) {
      m[k] = "strata";
    }
    return m;
  }();
  return keys;
}

bool Truthy(const Json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return s == "true" || s == "True" || s == "1" || s == "yes" || s == "on";
  }
  return false;
}

// A path to a nested "enabled": true, or "".
std::string FindEnabled(const Json& v, const std::string& path) {
  if (!v.is_object()) return "";
  for (const auto& [k, child] : v.items()) {
    const std::string p = JoinPath(path, k);
    if (k == "enabled" && Truthy(child)) return p;
    if (std::string f = FindEnabled(child, p); !f.empty()) return f;
  }
  return "";
}

void CheckCustom(const Section& top, const OtherKey& k, const Json& v) {
  ConfigContext* ctx = top.ctx();
  const std::string key(k.key);
  if (k.key == "communication_data_type") {
    if (v.is_string() && v.get<std::string>() != "fp32") {
      ctx->Warning(key, "= " + v.dump() + ": Strata reduces gradients in fp32; ignored");
    } else {
      ctx->Note(key, "accepted (Strata reduces gradients in fp32)");
    }
  } else if (k.key == "gradient_allreduce_op") {
    if (v.is_string() && v.get<std::string>() != "mean" && v.get<std::string>() != "MEAN") {
      ctx->Error(key, "= " + v.dump() + " changes the gradient scale; Strata averages (\"mean\")");
    } else {
      ctx->Note(key, "accepted (Strata averages gradients)");
    }
  } else if (k.key == "data_types") {
    const Json* g =
        v.is_object() && v.contains("grad_accum_dtype") ? &v["grad_accum_dtype"] : nullptr;
    if (g && !g->is_null() && !(g->is_string() && g->get<std::string>() == "fp32")) {
      ctx->Error("data_types.grad_accum_dtype",
                 "= " + g->dump() +
                     " accumulates gradients in lower precision, which changes the "
                     "math; Strata accumulates in fp32");
    } else {
      ctx->Note(key, "accepted, not used by Strata (gradients accumulate in fp32)");
    }
  } else if (k.key == "tensor_parallel") {
    const Json* t = v.is_object() && v.contains("autotp_size") ? &v["autotp_size"] : nullptr;
    if (t && t->is_number() && t->get<double>() > 1) {
      ctx->Error("tensor_parallel.autotp_size",
                 "= " + t->dump() + ": Strata has no tensor parallelism");
    } else {
      ctx->Note(key, "accepted, not used by Strata (no tensor parallelism)");
    }
  } else if (k.key == "sequence_parallel_size") {
    if (v.is_number() && v.get<double>() > 1) {
      ctx->Error(key, "= " + v.dump() + ": Strata has no sequence parallelism");
    } else {
      ctx->Note(key, "accepted, not used by Strata");
    }
  }
}

}  // namespace

const std::vector<std::string_view>& ImplementedTopLevelKeys() {
  static const std::vector<std::string_view> keys = {"train_batch_size",
                                                     "train_micro_batch_size_per_gpu",
                                                     "gradient_accumulation_steps",
                                                     "gradient_clipping",
                                                     "prescale_gradients",
                                                     "gradient_predivide_factor",
                                                     "steps_per_print",
                                                     "wall_clock_breakdown",
                                                     "optimizer",
                                                     "scheduler",
                                                     "fp16",
                                                     "bf16",
                                                     "bfloat16",
                                                     "zero_optimization",
                                                     "activation_checkpointing",
                                                     "aio",
                                                     "strata"};
  return keys;
}

void CheckUnimplementedDeepSpeedKeys(const Section& top) {
  ConfigContext* ctx = top.ctx();
  for (const auto& k : OtherKeys()) {
    const Json* v = top.Get(k.key);
    if (!v) continue;
    const std::string key(k.key);
    const std::string what(k.what);
    switch (k.rule) {
      case Rule::kNote:
        ctx->Note(key, "accepted, not used by Strata (" + what + ")");
        break;
      case Rule::kErrorIfEnabled:
        if (v->is_object() && v->contains("enabled") && Truthy((*v)["enabled"])) {
          ctx->Error(key + ".enabled", "= true turns on " + what +
                                           ", which changes the math; Strata cannot honour it "
                                           "(set it false or remove the section)");
        } else {
          ctx->Note(key, "accepted, not used by Strata (" + what + ", off)");
        }
        break;
      case Rule::kErrorIfAnyEnabled:
        if (std::string p = FindEnabled(*v, key); !p.empty()) {
          ctx->Error(p, "= true turns on " + what +
                            ", which changes the math; Strata cannot "
                            "honour it");
        } else {
          ctx->Note(key, "accepted, not used by Strata (" + what + ", off)");
        }
        break;
      case Rule::kErrorIfPresent:
        ctx->Error(key, what + "; Strata cannot honour it (remove the section)");
        break;
      case Rule::kCustom:
        CheckCustom(top, k, *v);
        break;
    }
  }
}

void CheckUnknownTopLevelKeys(const Section& top, bool unknown_is_error,
                              const std::vector<std::string_view>& extra_known) {
  if (!top.present()) return;
  ConfigContext* ctx = top.ctx();
  std::vector<std::string_view> known = ImplementedTopLevelKeys();
  for (const auto& k : OtherKeys()) known.push_back(k.key);
  for (const auto& [key, value] : ctx->doc().root.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (std::find(extra_known.begin(), extra_known.end(), key) != extra_known.end()) continue;
    const auto& nested = NestedKeys();
    if (auto it = nested.find(key); it != nested.end()) {
      ctx->Error(key, "belongs in '" + std::string(it->second) + "' (" + std::string(it->second) +
                          "." + key + "); at the top level DeepSpeed ignores it");
      continue;
    }
    if (std::string s = ClosestKey(key, known); !s.empty()) {
      ctx->Error(key, "not a DeepSpeed key (did you mean '" + s +
                          "'?); DeepSpeed would ignore it silently");
      continue;
    }
    std::vector<std::string_view> nested_names;
    for (const auto& [k, v] : nested) nested_names.push_back(k);
    if (std::string s = ClosestKey(key, nested_names); !s.empty()) {
      ctx->Error(
          key, "not a DeepSpeed key (did you mean '" + std::string(nested.at(s)) + "." + s + "'?)");
      continue;
    }
    if (unknown_is_error) {
      ctx->Error(key, "not a DeepSpeed key (an error because strata.unknown_keys is \"error\")");
    } else {
      ctx->Warning(key, "not a DeepSpeed key, ignored");
    }
  }
}

}  // namespace strata::internal
