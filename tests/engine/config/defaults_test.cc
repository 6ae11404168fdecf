// Defaults equal DeepSpeed's (runtime/constants.py, zero/config.py, zero/offload_config.py,
// precision_config.py, lr_schedules.py, swap_tensor aio, the optimizers' signatures) and the
// resolved JSON has every key and no "auto".
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "engine/config/config_json.h"
#include "tests/engine/config/config_test_util.h"

namespace strata {
namespace {

using ::strata::testing::AllDiagnostics;
using ::strata::testing::Check;

Config Valid(const std::string& text, RunContext run = {}) {
  Config c = Check(text, run);
  EXPECT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  return c;
}

TEST(ConfigDefaultsTest, TopLevelMatchesDeepSpeed) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1})");
  EXPECT_EQ(c.training.gradient_clipping, 1.0);
  EXPECT_EQ(c.training.steps_per_print, 10);
  EXPECT_FALSE(c.training.wall_clock_breakdown);
  EXPECT_FALSE(c.training.prescale_gradients);
  EXPECT_EQ(c.training.gradient_predivide_factor, 1.0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);
}

TEST(ConfigDefaultsTest, OptimizerMatchesDeepSpeedsAdam) {
  Config none = Valid(R"({"train_micro_batch_size_per_gpu": 1})");
  EXPECT_FALSE(none.optimizer.from_file);
  EXPECT_EQ(none.optimizer.type, OptimizerType::kAdamW);
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam"}})");
  EXPECT_TRUE(c.optimizer.from_file);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_TRUE(c.optimizer.bias_correction);
  EXPECT_FALSE(c.optimizer.torch_adam);
  // DeepSpeed's "Adam" is decoupled (AdamW) unless adam_w_mode is false.
  EXPECT_TRUE(c.optimizer.adam_w_mode);
}

TEST(ConfigDefaultsTest, AdamWModeFollowsDeepSpeed) {
  auto mode = [](const char* type, const char* extra) {
    return Valid(std::string(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": ")") +
                 type + R"(", "params": {)" + extra + "}}}")
        .optimizer;
  };
  EXPECT_FALSE(mode("Adam", R"("adam_w_mode": false)").adam_w_mode);
  EXPECT_TRUE(mode("AdamW", R"("adam_w_mode": false)").adam_w_mode);     // AdamW always decoupled
  EXPECT_EQ(mode("AdamW", R"("torch_adam": true)").weight_decay, 0.01);  // torch.optim.AdamW
  EXPECT_EQ(mode("adamw", "").type, OptimizerType::kAdamW);              // DeepSpeed ignores case
  OptimizerConfig ada = mode("Adagrad", "");
  EXPECT_EQ(ada.lr, 1e-2);
  EXPECT_EQ(ada.eps, 1e-10);
  OptimizerConfig lion = mode("Lion", R"("betas": [0.95, 0.98])");
  EXPECT_EQ(lion.type, OptimizerType::kLion);
  EXPECT_EQ(lion.beta1, 0.95);
  EXPECT_EQ(lion.beta2, 0.98);
}

TEST(ConfigDefaultsTest, Fp16AndBf16MatchDeepSpeed) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}})");
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_FALSE(c.fp16.auto_cast);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_FALSE(c.bf16.immediate_grad_update);
  EXPECT_FALSE(c.bf16.check_grad_overflow);
}

TEST(ConfigDefaultsTest, ZeroMatchesDeepSpeed) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1})");
  const ZeroConfig& z = c.zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_FALSE(z.round_robin_gradients);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);  // DeepSpeed's code, not its docs' 5e8
  EXPECT_EQ(z.param_persistence_threshold, 100000);
  EXPECT_EQ(z.model_persistence_threshold, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);
  // overlap_comm's default depends on the stage.
  EXPECT_TRUE(Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})")
                  .zero.overlap_comm);
}

TEST(ConfigDefaultsTest, OffloadMatchesDeepSpeed) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}})");
  const OffloadParamConfig& p = c.zero.offload_param;
  EXPECT_EQ(p.device, OffloadDevice::kCpu);
  EXPECT_TRUE(p.pin_memory);  // DeepSpeed's default since 2026-08 (shared/CONFIG.md)
  EXPECT_EQ(p.buffer_count, 5);
  EXPECT_EQ(p.buffer_size, 100000000);
  EXPECT_EQ(p.max_in_cpu, 1000000000);
  const OffloadOptimizerConfig& o = c.zero.offload_optimizer;
  EXPECT_EQ(o.device, OffloadDevice::kCpu);
  EXPECT_TRUE(o.pin_memory);
  EXPECT_EQ(o.buffer_count, 4);
  EXPECT_FALSE(o.pipeline_read);
  EXPECT_FALSE(o.pipeline_write);
  EXPECT_FALSE(o.fast_init);
  EXPECT_EQ(o.ratio, 1.0);
}

TEST(ConfigDefaultsTest, SchedulersMatchLrSchedules) {
  Config w = Valid(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW",
      "params": {"lr": 2e-5}}, "scheduler": {"type": "WarmupLR"}})");
  EXPECT_EQ(w.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(w.scheduler.warmup_max_lr, 2e-5);  // the optimizer's lr
  EXPECT_EQ(w.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(w.scheduler.warmup_type, "log");
  EXPECT_EQ(w.scheduler.last_batch_iteration, -1);
  Config cos = Valid(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type":
      "WarmupCosineLR", "params": {"total_num_steps": 100}}})");
  EXPECT_EQ(cos.scheduler.warmup_min_ratio, 0.0);
  EXPECT_EQ(cos.scheduler.cos_min_ratio, 1e-4);
  EXPECT_EQ(cos.scheduler.total_num_steps, 100);
  Config one = Valid(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "OneCycle",
      "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_stair_count": 3}}})");
  EXPECT_EQ(one.scheduler.cycle_first_step_size, 2000);
  EXPECT_EQ(one.scheduler.cycle_second_step_size, 2000);  // = first
  EXPECT_EQ(one.scheduler.cycle_second_stair_count, 3);   // = first
  EXPECT_EQ(one.scheduler.decay_step_size, 0);
  EXPECT_TRUE(one.scheduler.cycle_momentum);
  EXPECT_EQ(one.scheduler.cycle_min_mom, 0.8);
  EXPECT_EQ(one.scheduler.cycle_max_mom, 0.9);
  Config rt = Valid(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type":
      "LRRangeTest"}})");
  EXPECT_EQ(rt.scheduler.lr_range_test_min_lr, 1e-3);
  EXPECT_EQ(rt.scheduler.lr_range_test_step_size, 2000);
  EXPECT_EQ(rt.scheduler.lr_range_test_step_rate, 1.0);
  EXPECT_FALSE(rt.scheduler.lr_range_test_staircase);
}

TEST(ConfigDefaultsTest, AioActivationCheckpointingAndStrata) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1})");
  EXPECT_EQ(c.aio.block_size, 1048576u);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.thread_count, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_EQ(c.aio.engine, IoEngineKind::kAuto);
  const ActivationCheckpointingConfig& a = c.activation_checkpointing;
  EXPECT_FALSE(a.partition_activations || a.contiguous_memory_optimization || a.cpu_checkpointing ||
               a.synchronize_checkpoint_boundary || a.profile);
  EXPECT_FALSE(a.number_checkpoints.has_value());
  const StrataConfig& s = c.strata;
  EXPECT_TRUE(s.swap_checksums);
  EXPECT_FALSE(s.unknown_keys_error);
  EXPECT_EQ(s.comm_backend, CommBackend::kAuto);
  EXPECT_EQ(s.comm_timeout_s, 300.0);
  EXPECT_EQ(s.device, DeviceChoice::kAuto);
  EXPECT_EQ(s.device_memory_bytes, uint64_t{1} << 30);
  EXPECT_EQ(s.link_gbps, 0.0);
  EXPECT_EQ(s.trace_path, "");
  EXPECT_TRUE(s.overlap_step);
  EXPECT_EQ(s.pinned_memory_limit_bytes, 0u);
  EXPECT_TRUE(s.swap_chunk_auto);  // engine/nvme/swap_chunks.h: Note [Auto swap chunks]
}

// strata.swap_chunk_bytes: bytes or a size string (no longer auto), "auto" (said as auto), and a
// size too small for one 4 KiB page per part refused naming the key and the minimum.
TEST(ConfigDefaultsTest, SwapChunkBytesTakesSizesAutoAndRefusesTooSmall) {
  Config c =
      Valid(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"swap_chunk_bytes": "32M"}})");
  EXPECT_EQ(c.strata.swap_chunk_bytes, uint64_t{32} << 20);
  EXPECT_FALSE(c.strata.swap_chunk_auto);
  Config a =
      Valid(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"swap_chunk_bytes": "auto"}})");
  EXPECT_TRUE(a.strata.swap_chunk_auto);
  Config bad = testing::Check(
      R"({"train_micro_batch_size_per_gpu": 1, "strata": {"swap_chunk_bytes": 100}})");
  EXPECT_TRUE(testing::HasDiag(bad, Severity::kError, "strata.swap_chunk_bytes", "at least 4096"))
      << testing::AllDiagnostics(bad);
}

TEST(ConfigDefaultsTest, StrataSectionIsRead) {
  Config c = Valid(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"aio_engine": "libaio",
      "swap_checksums": false, "comm_backend": "mpi", "comm_timeout_s": 60, "device": "host",
      "device_memory": "2G", "link_gbps": 25, "trace_path": "t.json", "overlap_step": false,
      "pinned_memory_limit": "512M", "unknown_keys": "error"}})");
  EXPECT_EQ(c.aio.engine, IoEngineKind::kLibaio);
  EXPECT_FALSE(c.strata.swap_checksums);
  EXPECT_EQ(c.strata.comm_backend, CommBackend::kMpi);
  EXPECT_EQ(c.strata.comm_timeout_s, 60.0);
  EXPECT_EQ(c.strata.device, DeviceChoice::kHost);
  EXPECT_EQ(c.strata.device_memory_bytes, uint64_t{2} << 30);
  EXPECT_EQ(c.strata.link_gbps, 25.0);
  EXPECT_EQ(c.strata.trace_path, "t.json");
  EXPECT_FALSE(c.strata.overlap_step);
  EXPECT_EQ(c.strata.pinned_memory_limit_bytes, uint64_t{512} << 20);
  EXPECT_TRUE(c.strata.unknown_keys_error);
}

// Every key of the resolved JSON, recursively: none may be the string "auto".
bool ContainsAuto(const Json& j) {
  if (j.is_string()) return j.get<std::string>() == "auto";
  if (!j.is_structured()) return false;
  for (const auto& v : j) {
    if (ContainsAuto(v)) return true;
  }
  return false;
}

TEST(ConfigDefaultsTest, ResolvedJsonHasEveryKeyAndNoAuto) {
  RunContext run;
  run.hidden_size = 4096;
  run.total_num_steps = 1000;
  Config c = Valid(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
      "weight_decay": "auto"}}, "scheduler": {"type": "WarmupDecayLR", "params": {
      "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
      "total_num_steps": "auto"}}, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
      "stage3_gather_16bit_weights_on_model_save": "auto"}})",
                   run);
  Json j = ConfigToJson(c);
  // strata.aio_engine / device / comm_backend = "auto" are Strata's own run-time choices (probed
  // on the machine that runs), not Hugging Face's placeholder: everything else is resolved.
  Json without_strata = j;
  without_strata.erase("strata");
  EXPECT_FALSE(ContainsAuto(without_strata)) << j.dump(2);
  for (const char* k : {"train_batch_size", "gradient_clipping", "optimizer", "scheduler", "fp16",
                        "bf16", "zero_optimization", "activation_checkpointing", "aio", "strata"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["zero_optimization"]["reduce_bucket_size"], 4096 * 4096);
  EXPECT_EQ(j["zero_optimization"]["stage3_prefetch_bucket_size"],
            static_cast<int64_t>(0.9 * 4096 * 4096));
  EXPECT_EQ(j["zero_optimization"]["stage3_param_persistence_threshold"], 40960);
  EXPECT_EQ(j["scheduler"]["params"]["total_num_steps"], 1000);
  EXPECT_EQ(j["zero_optimization"]["offload_param"]["buffer_count"], 5);
  EXPECT_EQ(j["strata"]["comm_timeout_s"], 300.0);
}

}  // namespace
}  // namespace strata
