// Every kind of problem is reported with its JSON path, its line and column and a "did you
// mean"; all problems of a file at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "tests/engine/config/config_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::AllDiagnostics;
using ::strata::testing::Check;
using ::strata::testing::HasDiag;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// `body` is spliced into a config that is otherwise valid.
Result<Config> Load(const std::string& body) {
  return LoadConfigText("{\"train_micro_batch_size_per_gpu\": 1,\n" + body + "}", "e.json",
                        RunContext{});
}

Config CheckBody(const std::string& body) {
  return Check("{\"train_micro_batch_size_per_gpu\": 1,\n" + body + "}");
}

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;

TEST(ConfigErrorsTest, TopLevelLookAlikesAreErrors) {
  EXPECT_THAT(Load(R"("bp16": {"enabled": true})"),
              StatusIs(kInvalid, AllOf(HasSubstr("e.json:2:1: error: bp16"),
                                       HasSubstr("did you mean 'bf16'?"))));
  EXPECT_THAT(Load(R"("micro_batch_size_per_gpu": 4)"),
              StatusIs(kInvalid, HasSubstr("did you mean 'train_micro_batch_size_per_gpu'?")));
  EXPECT_THAT(Load(R"("round_robin_gradients": true)"),
              StatusIs(kInvalid, AllOf(HasSubstr("round_robin_gradients: belongs in "
                                                 "'zero_optimization'"),
                                       HasSubstr("zero_optimization.round_robin_gradients"))));
  EXPECT_THAT(Load(R"("zero_optimisation": {"stage": 2})"),
              StatusIs(kInvalid, HasSubstr("did you mean 'zero_optimization'?")));
  EXPECT_THAT(Load(R"("queue_dept": 8)"),
              StatusIs(kInvalid, HasSubstr("did you mean 'aio.queue_depth'?")));
}

TEST(ConfigErrorsTest, UnrelatedTopLevelKeysWarnUnlessStrataSaysError) {
  Config c = CheckBody(R"("comms_config": {"verbose": false}, "cuda_visible_devices": "0,1",
                          "log": "x")");
  EXPECT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  for (const char* k : {"comms_config", "cuda_visible_devices", "log"}) {
    EXPECT_TRUE(HasDiag(c, Severity::kWarning, k, "not a DeepSpeed key, ignored")) << k;
  }
  EXPECT_THAT(Load(R"("comms_config": {}, "strata": {"unknown_keys": "error"})"),
              StatusIs(kInvalid, AllOf(HasSubstr("comms_config: not a DeepSpeed key"),
                                       HasSubstr("strata.unknown_keys"))));
}

TEST(ConfigErrorsTest, UnknownKeysInsideSectionsAreErrorsWithSuggestions) {
  EXPECT_THAT(
      Load(R"("zero_optimization": {"stage": 3,
                         "stage3_param_persitence_threshold": 1e5})"),
      StatusIs(kInvalid, AllOf(HasSubstr("e.json:3:26: error: "
                                         "zero_optimization.stage3_param_persitence_threshold"),
                               HasSubstr("did you mean 'stage3_param_persistence_threshold'?"))));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 2, "comm_overlap": true})"),
              StatusIs(kInvalid, HasSubstr("did you mean 'overlap_comm'?")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "aio": {"queue_depth": 8}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.aio"),
                                       HasSubstr("'aio' is a top-level section"))));
  EXPECT_THAT(Load(R"("bf16": {"enabled": true, "loss_scale": 0})"),
              StatusIs(kInvalid, AllOf(HasSubstr("bf16.loss_scale"),
                                       HasSubstr("bf16 needs no loss scaling"))));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                         "pin_mem": true}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.offload_param.pin_mem"),
                                       HasSubstr("did you mean 'pin_memory'?"))));
  EXPECT_THAT(Load(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_num_step": 10}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("scheduler.params.warmup_num_step"),
                                       HasSubstr("did you mean 'warmup_num_steps'?"))));
  EXPECT_THAT(Load(R"("strata": {"aio_engin": "libaio"})"),
              StatusIs(kInvalid, AllOf(HasSubstr("strata.aio_engin"),
                                       HasSubstr("did you mean 'aio_engine'?"))));
  EXPECT_THAT(Load(R"("aio": {"queue_dept": 8})"),
              StatusIs(kInvalid, AllOf(HasSubstr("aio.queue_dept"),
                                       HasSubstr("did you mean 'queue_depth'?"))));
  EXPECT_THAT(Load(R"("activation_checkpointing": {"partition_activation": true})"),
              StatusIs(kInvalid, HasSubstr("did you mean 'partition_activations'?")));
}

TEST(ConfigErrorsTest, WrongTypesAndRangesNameWhatIsAllowed) {
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 4})"),
              StatusIs(kInvalid, HasSubstr("zero_optimization.stage: = 4 is out of range: must be "
                                           "in [0, 3]")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.offload_param.device"),
                                       HasSubstr("allowed values: \"none\", \"cpu\", \"nvme\""))));
  EXPECT_THAT(Load(R"("fp16": {"enabled": "maybe"})"),
              StatusIs(kInvalid, HasSubstr("fp16.enabled: must be true or false, got \"maybe\"")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
                         "ratio": 1.5}})"),
              StatusIs(kInvalid, HasSubstr("offload_optimizer.ratio: = 1.5 is out of range: must "
                                           "be in (0, 1]")));
  EXPECT_THAT(Load(R"("aio": {"block_size": 1000})"),
              StatusIs(kInvalid, AllOf(HasSubstr("aio.block_size"), HasSubstr("4096"))));
  EXPECT_THAT(Load(R"("aio": {"use_gds": true})"), StatusIs(kInvalid, HasSubstr("aio.use_gds")));
  EXPECT_THAT(Load(R"("strata": {"device_memory": "lots"})"),
              StatusIs(kInvalid, HasSubstr("strata.device_memory: = \"lots\" is not a byte size")));
  EXPECT_THAT(Load(R"("strata": {"aio_engine": "spdk"})"),
              StatusIs(kInvalid, AllOf(HasSubstr("strata.aio_engine"), HasSubstr("io_uring"))));
  EXPECT_THAT(Load(R"("optimizer": {"type": "AdamW", "params": {"betas": [0.9]}})"),
              StatusIs(kInvalid, HasSubstr("optimizer.params.betas: must be two numbers")));
  EXPECT_THAT(Load(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linaer"}})"),
              StatusIs(kInvalid, HasSubstr("did you mean \"linear\"?")));
  EXPECT_THAT(Load(R"("zero_optimization": [3])"),
              StatusIs(kInvalid, HasSubstr("zero_optimization: must be an object")));
}

TEST(ConfigErrorsTest, OptimizersStrataCannotRunAreErrors) {
  EXPECT_THAT(
      Load(R"("optimizer": {"type": "AdamWW"})"),
      StatusIs(kInvalid, AllOf(HasSubstr("optimizer.type"), HasSubstr("did you mean \"AdamW\"?"))));
  EXPECT_THAT(Load(R"("optimizer": {"type": "Lamb"})"),
              StatusIs(kInvalid, HasSubstr("a DeepSpeed optimizer Strata does not implement")));
  EXPECT_THAT(Load(R"("optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("optimizer.params.max_grad_norm"),
                                       HasSubstr("'gradient_clipping'"))));
  EXPECT_THAT(Load(R"("optimizer": {"type": "Adam", "params": {"amsgrad": true}})"),
              StatusIs(kInvalid, HasSubstr("optimizer.params.amsgrad: = true changes the update")));
}

TEST(ConfigErrorsTest, CrossKeyRules) {
  // offload_param below stage 3: no effect (as in DeepSpeed), a warning (auto_sizes_test.cc).
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}})"),
              testing::IsOk());
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
                         "nvme_path": "/nvme", "ratio": 0.5}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"),
                                       HasSubstr("cannot be used with device \"nvme\""))));
  // Partial offload runs at stages 1-3 (DeepSpeed: stage 3 only; a warning says so).
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                         "ratio": 0.5}})"),
              testing::IsOk());
  EXPECT_THAT(Load(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})"),
              StatusIs(kInvalid, HasSubstr("fp16 and bf16 are both enabled")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.offload_param.nvme_path"),
                                       HasSubstr("needs a path"))));
  EXPECT_THAT(Load(R"("activation_checkpointing": {"cpu_checkpointing": true})"),
              StatusIs(kInvalid, HasSubstr("needs partition_activations = true")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "cpu_offload": true,
                         "offload_optimizer": {"device": "cpu"}})"),
              StatusIs(kInvalid, HasSubstr("'cpu_offload' is the old form")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "prefetch_bucket_size": 1,
                         "stage3_prefetch_bucket_size": 2})"),
              StatusIs(kInvalid, HasSubstr("the same setting")));
}

TEST(ConfigErrorsTest, UnimplementedDeepSpeedSections) {
  Config c = CheckBody(R"("amp": {"enabled": false}, "tensorboard": {"enabled": true},
                          "flops_profiler": {"enabled": true}, "zero_allow_untested_optimizer": true)");
  EXPECT_EQ(c.report.ErrorCount(), 0u) << AllDiagnostics(c);
  EXPECT_TRUE(HasDiag(c, Severity::kNote, "amp", "not used by Strata"));
  EXPECT_TRUE(HasDiag(c, Severity::kNote, "tensorboard", "not used by Strata"));
  EXPECT_TRUE(HasDiag(c, Severity::kNote, "flops_profiler", "not used by Strata"));
  EXPECT_EQ(c.report.Count(Severity::kNote), 4u);
  EXPECT_THAT(Load(R"("amp": {"enabled": true, "opt_level": "O1"})"),
              StatusIs(kInvalid, AllOf(HasSubstr("amp.enabled"), HasSubstr("changes the math"))));
  EXPECT_THAT(Load(R"("sparse_attention": {"mode": "fixed"})"),
              StatusIs(kInvalid, HasSubstr("sparse_attention")));
  EXPECT_THAT(
      Load(R"("compression_training": {"weight_quantization": {"shared_parameters":
                         {"enabled": true}}})"),
      StatusIs(kInvalid, HasSubstr("compression_training.weight_quantization.shared_parameters."
                                   "enabled")));
  EXPECT_THAT(Load(R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})"),
              StatusIs(kInvalid, HasSubstr("fp16.fp16_master_weights_and_grads")));
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": 3, "zero_quantized_weights": true})"),
              StatusIs(kInvalid, HasSubstr("zero_optimization.zero_quantized_weights")));
}

TEST(ConfigErrorsTest, AutoWhereNothingResolvesItIsAnError) {
  EXPECT_THAT(Load(R"("zero_optimization": {"stage": "auto"})"),
              StatusIs(kInvalid, AllOf(HasSubstr("zero_optimization.stage"),
                                       HasSubstr("\"auto\" is not resolvable here"))));
}

TEST(ConfigErrorsTest, EveryProblemIsReportedAtOnceInFileOrder) {
  Config c = Check(R"({
  "train_micro_batch_size_per_gpu": 0,
  "bp16": {"enabled": true},
  "zero_optimization": {
    "stage": 3,
    "overlap_com": true,
    "offload_param": {"device": "nvme"}
  },
  "optimizer": {"type": "Adam", "params": {"lr": "fast"}}
})");
  ASSERT_EQ(c.report.ErrorCount(), 5u) << AllDiagnostics(c);
  const auto& d = c.report.diagnostics;
  EXPECT_EQ(d[0].path, "train_micro_batch_size_per_gpu");
  EXPECT_EQ(d[0].pos.line, 2);
  EXPECT_EQ(d[1].path, "bp16");
  EXPECT_EQ(d[1].pos.line, 3);
  EXPECT_EQ(d[2].path, "zero_optimization.overlap_com");
  EXPECT_EQ(d[2].pos.line, 6);
  EXPECT_EQ(d[2].pos.column, 5);
  EXPECT_EQ(d[3].path, "zero_optimization.offload_param.nvme_path");
  EXPECT_EQ(d[3].pos.line, 7);
  EXPECT_EQ(d[4].path, "optimizer.params.lr");
  EXPECT_EQ(d[4].pos.line, 9);
}

TEST(ConfigErrorsTest, MalformedAndMissingFiles) {
  EXPECT_THAT(LoadConfigText("{\"fp16\": {\"enabled\": true,}\n\"x\": 1}", "m.json", {}),
              StatusIs(kInvalid, AllOf(HasSubstr("m.json:2:1"), HasSubstr("invalid JSON"))));
  EXPECT_THAT(LoadConfigText("[1, 2]", "m.json", {}),
              StatusIs(kInvalid, HasSubstr("a DeepSpeed config is a JSON object")));
  EXPECT_THAT(LoadConfig("/nonexistent/ds.json", {}),
              StatusIs(kInvalid, HasSubstr("/nonexistent/ds.json")));
}

}  // namespace
}  // namespace strata
