// `strata estimate` and `strata train`'s memory table as a user runs them: the built binary,
// --json parsed, --emit-config fed to `strata config check`, bad flags refused with exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;

std::string Strata(const std::string& args) { return std::string(STRATA_BIN) + " " + args; }

TEST(EstimateCliTest, JsonListsEveryPlacementWithPerTierBytes) {
  const testing::CommandResult r = RunCommand(
      Strata("estimate --preset tiny --gpu-mem 1G --cpu-mem 8G --nvme 100G --seq-len 64 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["model"]["params"].get<uint64_t>(), 500'000u);
  ASSERT_EQ(j["placements"].size(), 12u);  // stages 0-3 x none/cpu/nvme
  int valid = 0;
  for (const nlohmann::json& p : j["placements"]) {
    if (!p["valid"].get<bool>()) {
      EXPECT_FALSE(p["reason"].get<std::string>().empty());
      continue;
    }
    ++valid;
    EXPECT_GT(p["per_rank_bytes"]["device"].get<uint64_t>(), 0u) << p.dump();
    EXPECT_TRUE(p["fits"].get<bool>()) << p.dump();
    if (p["offload"] == "nvme") {
      EXPECT_GT(p["per_rank_bytes"]["nvme"].get<uint64_t>(), 0u);
      EXPECT_GT(p["traffic"]["nvme_read_bytes"].get<uint64_t>(), 0u);
    }
    if (p["offload"] == "cpu") {
      EXPECT_GT(p["per_rank_bytes"]["pinned_cpu"].get<uint64_t>(), 0u);
    }
  }
  EXPECT_EQ(valid, 10);  // 0 x none, 1-3 x none/cpu/nvme
  // World 1 moves nothing in stage 0 without offload: it is the least traffic.
  EXPECT_EQ(j["best"]["stage"], 0);
  EXPECT_EQ(j["best"]["offload"], "none");
}

TEST(EstimateCliTest, SmallDeviceForcesOffload) {
  // 7b in bf16 on 8 ranks with 16 GiB each: the plain stages cannot hold 16 B/param.
  const testing::CommandResult r =
      RunCommand(Strata("estimate --preset 7b --world 8 --gpu-mem 16G --cpu-mem 512G --nvme 4T "
                        "--checkpointing --seq-len 512 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const nlohmann::json& p : j["placements"]) {
    if (p["valid"].get<bool>() && p["stage"] == 0) {
      EXPECT_FALSE(p["fits"].get<bool>());
      EXPECT_EQ(p["does_not_fit"], "device");
    }
  }
  ASSERT_FALSE(j["best"].is_null());
  EXPECT_GE(j["best"]["stage"].get<int>(), 1);
}

TEST(EstimateCliTest, EmittedConfigPassesConfigCheck) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("emitted.json");
  const testing::CommandResult r = RunCommand(
      Strata("estimate --preset 7b --gpu-mem 40G --cpu-mem 256G --nvme 2T --nvme-path /tmp "
             "--checkpointing --seq-len 512 --emit-config > " +
             cfg));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(cfg);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["zero_optimization"]["stage"], 3) << j.dump();  // only stage 3 holds 7b on 40 GiB
  const testing::CommandResult check = RunCommand(Strata("config check " + cfg));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST(EstimateCliTest, TextTableMarksWhatDoesNotFit) {
  const testing::CommandResult r = RunCommand(
      Strata("estimate --preset small --gpu-mem 64M --cpu-mem 8G --nvme 10G --seq-len 128"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no: device"));
  EXPECT_THAT(r.out, HasSubstr("not a valid placement"));
  EXPECT_THAT(r.out, HasSubstr("micro batch 1 x seq 128"));
}

TEST(EstimateCliTest, OneConfigShowsItsItems) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})";
  const testing::CommandResult r = RunCommand(Strata("estimate --preset tiny --config " + cfg));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fp32 master + moments + gradients (offload_optimizer cpu)"));
  EXPECT_THAT(r.out, HasSubstr("micro batch 2"));
}

TEST(EstimateCliTest, BadFlagsExitTwoWithAClearMessage) {
  struct Bad {
    std::string args, words;
  };
  for (const Bad& b : {Bad{"estimate", "exactly one of --preset"},
                       Bad{"estimate --preset tiny --params 5", "exactly one of"},
                       Bad{"estimate --preset huge", "presets: tiny, small, 1b, 7b"},
                       Bad{"estimate --preset tiny --world 0", "--world"},
                       Bad{"estimate --preset tiny --world 2 --nodes 3", "--nodes 3"},
                       Bad{"estimate --preset tiny --dtype fp8", "--dtype"},
                       Bad{"estimate --preset tiny --gpu-mem lots", "--gpu-mem"},
                       Bad{"estimate --preset tiny --seq-len 4096", "max_position_embeddings"},
                       Bad{"estimate --preset tiny --config /nonexistent.json", "nonexistent"},
                       Bad{"estimate --preset tiny --lm-head-chunk many",
                           "allowed: auto, 0 (whole logits) or a token count"}}) {
    const testing::CommandResult r = RunCommand(Strata(b.args));
    EXPECT_EQ(r.exit_code, 2) << b.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("strata estimate: ")) << b.args;
    EXPECT_THAT(r.err, HasSubstr(b.words)) << b.args;
  }
}

// The LM head's logits are one chunk's: --lm-head-chunk 16 at 2 x 64 tokens of tiny (vocab 256)
// plans (128 - 16) x 256 floats less device memory than the whole logits (0), and auto keeps
// these small logits whole.
TEST(EstimateCliTest, LmHeadChunkPlansOneChunkOfLogits) {
  auto device_bytes = [](const std::string& chunk) -> uint64_t {
    const testing::CommandResult r =
        RunCommand(Strata("estimate --preset tiny --micro-batch 2 --seq-len 64 --gpu-mem 1G "
                          "--cpu-mem 8G --nvme 10G --json --lm-head-chunk " +
                          chunk));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return 0;
    for (const nlohmann::json& p : j["placements"]) {
      if (p["stage"] == 0 && p["offload"] == "none") return p["per_rank_bytes"]["device"];
    }
    return 0;
  };
  const uint64_t whole = device_bytes("0"), chunked = device_bytes("16");
  EXPECT_EQ(whole - chunked, uint64_t{(128 - 16) * 256 * 4});
  EXPECT_EQ(device_bytes("auto"), whole);
  const testing::CommandResult text =
      RunCommand(Strata("estimate --preset tiny --micro-batch 2 --seq-len 64 --lm-head-chunk 16"));
  EXPECT_THAT(text.out, HasSubstr("LM head in chunks of 16 tokens"));
}

constexpr const char* kTrainConfig = R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
  "strata": {"device_memory": "256M"}
})";

TEST(TrainMemoryCliTest, JsonHasPlannedAndPeakBytesWithinTenPercent) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << kTrainConfig;
  const testing::CommandResult r =
      RunCommand(Strata("train --config " + cfg + " --init tiny --steps 2 --seq-len 32 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* tier : {"device", "pinned_cpu"}) {
    const double planned = j["planned_bytes"][tier].get<double>();
    const double peak = j["peak_bytes"][tier].get<double>();
    EXPECT_GT(planned, 0) << tier;
    EXPECT_NEAR(peak, planned, 0.10 * planned) << tier << " " << j.dump();
  }
  EXPECT_TRUE(j["peak_bytes"].contains("pageable_cpu"));
  EXPECT_EQ(j["peak_bytes"]["nvme"], 0);
}

// strata.lm_head_chunk: the run's head computes 16 tokens of logits at a time and its plan says
// so: the measured device peak is within 10% of the plan.
TEST(TrainMemoryCliTest, ChunkedLmHeadPeakMatchesItsPlan) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  nlohmann::json c = nlohmann::json::parse(kTrainConfig);
  c["strata"]["lm_head_chunk"] = 16;
  std::ofstream(cfg) << c.dump();
  const testing::CommandResult r =
      RunCommand(Strata("train --config " + cfg + " --init tiny --steps 2 --seq-len 32 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double planned = j["planned_bytes"]["device"].get<double>();
  EXPECT_NEAR(j["peak_bytes"]["device"].get<double>(), planned, 0.10 * planned) << j.dump();
}

// At stage 3 with parameters offloaded (the head's weight gathered for its forward and again
// for its backward, where the chunks are recomputed) the chunked head trains as the whole one.
TEST(TrainMemoryCliTest, ChunkedLmHeadAtStage3TrainsAsTheWholeHead) {
  testing::ScratchDir dir;
  std::vector<std::vector<double>> losses;
  for (int chunk : {0, 16}) {
    const std::string cfg = dir.File("c" + std::to_string(chunk) + ".json");
    nlohmann::json c = nlohmann::json::parse(kTrainConfig);
    c["zero_optimization"] = {{"stage", 3},
                              {"offload_param", {{"device", "cpu"}}},
                              {"offload_optimizer", {{"device", "cpu"}}},
                              {"stage3_param_persistence_threshold", 0}};
    c["gradient_clipping"] = 1.0;
    c["strata"]["lm_head_chunk"] = chunk;
    std::ofstream(cfg) << c.dump();
    const testing::CommandResult r =
        RunCommand(Strata("train --config " + cfg + " --init tiny --steps 3 --seq-len 32 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    losses.push_back(j["losses"].get<std::vector<double>>());
    const double planned = j["planned_bytes"]["device"].get<double>();
    EXPECT_NEAR(j["peak_bytes"]["device"].get<double>(), planned, 0.10 * planned) << j.dump();
  }
  ASSERT_EQ(losses[0].size(), 3u);
  ASSERT_EQ(losses[1].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * losses[0][i]);
}

TEST(TrainMemoryCliTest, TextPrintsThePlanAtStartAndPeaksAtTheEnd) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << kTrainConfig;
  const testing::CommandResult r =
      RunCommand(Strata("train --config " + cfg + " --init tiny --steps 1 --seq-len 32"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("memory plan (ZeRO-2, offload_optimizer cpu, fp32), per rank:"));
  EXPECT_THAT(r.out, HasSubstr("peak/plan"));
  EXPECT_THAT(r.out, HasSubstr("pageable cpu"));
}

TEST(TrainMemoryCliTest, CappedDeviceFailsAtStartWithTheTable) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("c.json");
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 0}, "strata": {"device_memory": "2M"}})";
  const testing::CommandResult r =
      RunCommand(Strata("train --config " + cfg + " --init tiny --steps 1 --seq-len 32"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("does not fit"));
  EXPECT_THAT(r.err, HasSubstr("device"));
  EXPECT_THAT(r.err, HasSubstr("planned"));  // the per-tier table
}

}  // namespace
}  // namespace strata
