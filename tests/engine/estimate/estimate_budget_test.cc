// `strata estimate` choosing the NVMe placements' buffers within the CPU budget (--cpu-mem), and
// what --emit-config prints of them, checked against numbers computed here: the model's
// parameter count from its published shape, DeepSpeed's memory formulas
// (estimate_zero3_model_states_mem_needs: 4 x the largest layer's parameters on the GPU with
// everything offloaded, 18 B/param x 1.5 of CPU memory for CPU offload) and ZeRO-Infinity's
// model states on NVMe (12 B/param of fp32 master and Adam moments, 2 more of 16-bit parameters
// beyond max_in_cpu, up to 20 with both gradients).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_command.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::RunCommand;

std::string Strata(const std::string& args) { return std::string(STRATA_BIN) + " " + args; }

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Parameters of a Llama from its config.json numbers (q, k, v, o, gate, up, down, two norms per
// layer; embeddings, final norm, an untied head).
struct LlamaDims {
  uint64_t vocab, hidden, inter, layers, heads, kv_heads;
  uint64_t Params() const {
    const uint64_t head_dim = hidden / heads, kv = kv_heads * head_dim;
    const uint64_t layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter + 2 * hidden;
    return layers * layer + 2 * vocab * hidden + hidden;
  }
  // DeepSpeed's largest layer: the module with the most parameters of its own (a Linear here).
  uint64_t LargestLayer() const { return std::max(vocab * hidden, hidden * inter); }
};
constexpr LlamaDims kLlama2_70b{32000, 8192, 28672, 80, 64, 8};

nlohmann::json Estimate(const std::string& args) {
  const testing::CommandResult r = RunCommand(Strata("estimate " + args + " --json"));
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

const nlohmann::json& Row(const nlohmann::json& j, int stage, const std::string& offload) {
  for (const nlohmann::json& p : j["placements"]) {
    if (p["stage"] == stage && p["offload"] == offload) return p;
  }
  static const nlohmann::json none;
  ADD_FAILURE() << "no row stage " << stage << " " << offload;
  return none;
}

uint64_t Cpu(const nlohmann::json& row) {
  return row["per_rank_bytes"]["pinned_cpu"].get<uint64_t>() +
         row["per_rank_bytes"]["pageable_cpu"].get<uint64_t>();
}

// Llama 2 70B on nodes of one 80 GB GPU, 128 GB of RAM and 4 TB of NVMe. Eight such nodes: the
// NVMe placement fits with its buffers sized within 128 GB. One node: the device and the NVMe
// hold it (the device holds far more than DeepSpeed's largest layer term); the CPU either fits
// or the output says the minimum pipeline needs more than the 128 GB.
TEST(EstimateBudgetTest, Llama70bFitsOnNvmeNodesOf80GGpu128GRam) {
  const uint64_t p = kLlama2_70b.Params();
  for (int nodes : {8, 1}) {
    const nlohmann::json j = Estimate(
        "--preset llama-70b --gpu-mem 80G --cpu-mem 128G --nvme 4T --checkpointing "
        "--world " +
        std::to_string(nodes) + " --nodes " + std::to_string(nodes));
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["model"]["params"].get<uint64_t>(), p);
    EXPECT_EQ(p, 68976648192u);  // Llama 2 70B's published count (68.98B)
    const nlohmann::json& nvme = Row(j, 3, "nvme");
    const uint64_t device = nvme["per_rank_bytes"]["device"].get<uint64_t>();
    EXPECT_GE(device, 4 * kLlama2_70b.LargestLayer()) << nodes;  // DeepSpeed's GPU term
    EXPECT_LE(device, 80 * kGiB) << nodes;
    const double per_rank = static_cast<double>(p) / nodes;
    const double nvme_bytes = nvme["per_rank_bytes"]["nvme"].get<double>();
    // At least Infinity's fp32 master + moments (the 16-bit parameters within max_in_cpu stay
    // in CPU memory).
    EXPECT_GE(nvme_bytes, 12 * per_rank) << nodes;
    EXPECT_LE(nvme_bytes, 20 * per_rank * 1.001) << nodes;
    EXPECT_LE(nvme_bytes, 4e12) << nodes;
    // CPU offload needs DeepSpeed's 18 B/param (without its 1.5 buffer factor) per node: 1.2 TB.
    const nlohmann::json& cpu = Row(j, 3, "cpu");
    EXPECT_GE(static_cast<double>(Cpu(cpu)), 16 * per_rank) << nodes;
    EXPECT_GT(18 * per_rank * 1.5, 128.0 * kGiB);
    EXPECT_EQ(cpu["does_not_fit"], "cpu") << nodes;
    // The NVMe placement's buffers were chosen within the per-rank budget.
    EXPECT_EQ(nvme["cpu_budget_per_rank_bytes"].get<uint64_t>(), 128 * kGiB) << nodes;
    if (nvme["fits"].get<bool>()) {
      EXPECT_LE(Cpu(nvme), 128 * kGiB) << nodes;
    } else {
      EXPECT_EQ(nvme["does_not_fit"], "cpu") << nodes;
      EXPECT_GT(nvme["minimum_cpu_bytes"].get<uint64_t>(), 128 * kGiB) << nodes;
      EXPECT_THAT(nvme["does_not_fit_detail"].get<std::string>(), HasSubstr("minimum pipeline"));
    }
    if (nodes == 8) {
      EXPECT_TRUE(nvme["fits"].get<bool>()) << nvme.dump();
      EXPECT_EQ(j["best"]["stage"], 3);
      EXPECT_EQ(j["best"]["offload"], "nvme");
    }
  }
}

// The presets have their models' published parameter counts.
TEST(EstimateBudgetTest, PresetsHaveThePublishedShapes) {
  struct Case {
    const char* preset;
    uint64_t params;
  };
  for (const Case& c : {Case{"3b", 3212749824u},              // Llama 3.2 3B (tied embeddings)
                        Case{"llama-70b", 68976648192u},      // Llama 2 70B
                        Case{"llama3-70b", 70553706496u}}) {  // Llama 3 70B
    const nlohmann::json j = Estimate(std::string("--preset ") + c.preset +
                                      " --gpu-mem 80G --cpu-mem 1T --nvme 4T --checkpointing");
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["model"]["params"].get<uint64_t>(), c.params) << c.preset;
  }
}

// A device smaller than one layer: the output names that layer (Llama 2 70B's embeddings,
// 32000 x 8192, in bf16 with fp32 gradients: 6 B/param = 1.5 GiB).
TEST(EstimateBudgetTest, NamesTheSingleLayerThatDoesNotFitTheDevice) {
  const testing::CommandResult r =
      RunCommand(Strata("estimate --preset llama-70b --gpu-mem 1G --cpu-mem 128G --nvme 4T "
                        "--checkpointing --seq-len 64 --world 64 --nodes 64"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the single layer model.embed_tokens.weight (262144000 params)"));
  EXPECT_THAT(r.out, HasSubstr("stage 3 nvme: does not fit: device"));
}

// The buffers grow with the budget: at 1 TB the chosen sizes are DeepSpeed's defaults; at exactly
// the minimum pipeline the buffers are the fewest and smallest (a sub-group size that costs no
// more bytes after the allocator's rounding may still grow); one byte less does not fit.
TEST(EstimateBudgetTest, BuffersGrowWithTheBudgetAndStayWithinIt) {
  const nlohmann::json big =
      Estimate("--preset 1b --gpu-mem 16G --cpu-mem 1T --nvme 1T --checkpointing --seq-len 512");
  ASSERT_FALSE(big.is_discarded());
  const nlohmann::json& b = Row(big, 3, "nvme");
  ASSERT_TRUE(b["fits"].get<bool>()) << b.dump();
  EXPECT_EQ(b["chosen"]["zero_optimization.offload_optimizer.buffer_count"], 4);
  EXPECT_EQ(b["chosen"]["zero_optimization.offload_param.buffer_count"], 5);
  EXPECT_EQ(b["chosen"]["zero_optimization.sub_group_size"], 1000000000);
  EXPECT_EQ(b["chosen"]["zero_optimization.offload_param.buffer_size"], 100000000);
  const uint64_t minimum = b["minimum_cpu_bytes"].get<uint64_t>();
  ASSERT_GT(minimum, 0u);
  EXPECT_LT(minimum, Cpu(b));

  const nlohmann::json tight =
      Estimate("--preset 1b --gpu-mem 16G --nvme 1T --checkpointing --seq-len 512 --cpu-mem " +
               std::to_string(minimum));
  const nlohmann::json& t = Row(tight, 3, "nvme");
  ASSERT_TRUE(t["fits"].get<bool>()) << t.dump();
  EXPECT_EQ(Cpu(t), minimum);
  EXPECT_EQ(t["chosen"]["zero_optimization.offload_optimizer.buffer_count"], 1);
  EXPECT_EQ(t["chosen"]["zero_optimization.offload_param.buffer_count"], 1);
  // TinyLlama's largest parameter is its 32000 x 2048 embedding: the smallest parameter buffer.
  EXPECT_EQ(t["chosen"]["zero_optimization.offload_param.buffer_size"], 32000 * 2048);

  const nlohmann::json below =
      Estimate("--preset 1b --gpu-mem 16G --nvme 1T --checkpointing --seq-len 512 --cpu-mem " +
               std::to_string(minimum - 1));
  EXPECT_EQ(Row(below, 3, "nvme")["does_not_fit"], "cpu");
}

// --emit-config prints the chosen sizes and the budget; `strata estimate --config` of it plans
// the same bytes and fits, and `strata config check` accepts it.
TEST(EstimateBudgetTest, EmittedConfigCarriesTheChosenSizes) {
  testing::ScratchDir dir;
  const std::string cfg = dir.File("emitted.json");
  const std::string machine =
      "--gpu-mem 8G --cpu-mem 16G --nvme 1T --nvme-path /tmp --checkpointing --seq-len 512";
  const testing::CommandResult r =
      RunCommand(Strata("estimate --preset 1b " + machine + " --emit-config > " + cfg));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(cfg);
  const nlohmann::json e = nlohmann::json::parse(in);
  const nlohmann::json j = Estimate("--preset 1b " + machine);
  ASSERT_EQ(j["best"]["offload"], "nvme") << j["best"].dump();
  const nlohmann::json& row = Row(j, j["best"]["stage"].get<int>(), "nvme");
  for (const auto& [path, value] : row["chosen"].items()) {
    std::string pointer = "/" + path;
    for (char& ch : pointer) ch = ch == '.' ? '/' : ch;
    EXPECT_EQ(e.at(nlohmann::json::json_pointer(pointer)), value) << path;
  }
  EXPECT_EQ(e["strata"]["cpu_memory"].get<uint64_t>(), 16 * kGiB);
  const nlohmann::json again = Estimate("--preset 1b " + machine + " --config " + cfg);
  ASSERT_EQ(again["placements"].size(), 1u);
  EXPECT_TRUE(again["placements"][0]["fits"].get<bool>());
  EXPECT_EQ(again["placements"][0]["per_rank_bytes"], row["per_rank_bytes"]);
  const testing::CommandResult check = RunCommand(Strata("config check " + cfg));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// offload_param's swap buffers together must hold the largest shard it swaps (the engine's
// ParamSwapper refuses otherwise): estimate says so from the plan, naming the key and the size
// that works, and both pieces of advice (that size, "auto") then plan and fit. The shard here is
// the 1b preset's embedding, 32000 x 2048 = 65,536,000 elements, over 4 buffers: 16,384,000.
TEST(EstimateBudgetTest, ParamSwapBuffersMustHoldTheLargestShard) {
  testing::ScratchDir dir;
  auto config = [&](const nlohmann::json& buffer_size) {
    const std::string cfg =
        dir.File("c" + (buffer_size.is_string() ? "auto" : buffer_size.dump()) + ".json");
    nlohmann::json c = {
        {"train_micro_batch_size_per_gpu", 1},
        {"bf16", {{"enabled", true}}},
        {"zero_optimization",
         {{"stage", 3},
          {"offload_param",
           {{"device", "nvme"},
            {"nvme_path", dir.File("swap")},
            {"buffer_count", 4},
            {"buffer_size", buffer_size}}},
          {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", dir.File("swap")}}}}}};
    std::ofstream(cfg) << c.dump();
    return cfg;
  };
  const std::string machine = "--preset 1b --gpu-mem 8G --cpu-mem 16G --nvme 1T --seq-len 64";
  const testing::CommandResult low =
      RunCommand(Strata("estimate " + machine + " --config " + config(1000000)));
  ASSERT_NE(low.exit_code, 0) << low.out;
  EXPECT_THAT(low.err, HasSubstr("offload_param"));
  EXPECT_THAT(low.err, HasSubstr("65536000 elements"));
  EXPECT_THAT(low.err, HasSubstr("= 4000000"));
  const size_t at = low.err.find("at least ");
  ASSERT_NE(at, std::string::npos) << low.err;
  const int64_t advised = std::stoll(low.err.substr(at + 9));
  EXPECT_EQ(advised, 65536000 / 4);
  for (const nlohmann::json& size : {nlohmann::json(advised), nlohmann::json("auto")}) {
    const nlohmann::json j = Estimate(machine + " --config " + config(size));
    ASSERT_EQ(j["placements"].size(), 1u) << size;
    EXPECT_TRUE(j["placements"][0]["fits"].get<bool>()) << size << j.dump();
  }
  const testing::CommandResult one_less =
      RunCommand(Strata("estimate " + machine + " --config " + config(advised - 1)));
  EXPECT_NE(one_less.exit_code, 0) << one_less.out;
}

// `strata train` under strata.cpu_memory: below the minimum pipeline it stops before training
// with the table, naming the key and the minimum; at that minimum it trains, the pinned peak
// within the budget less the planned pageable bytes.
TEST(TrainBudgetCliTest, RefusesBelowTheMinimumAndTrainsAtIt) {
  testing::ScratchDir dir;
  auto config = [&](const std::string& cpu_memory) {
    const std::string cfg = dir.File("c" + cpu_memory + ".json");
    nlohmann::json c = {
        {"train_micro_batch_size_per_gpu", 2},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
        {"zero_optimization",
         {{"stage", 3},
          {"sub_group_size", "auto"},
          {"offload_param",
           {{"device", "nvme"},
            {"nvme_path", dir.File("swap")},
            {"buffer_count", "auto"},
            {"buffer_size", "auto"},
            {"max_in_cpu", "auto"}}},
          {"offload_optimizer",
           {{"device", "nvme"}, {"nvme_path", dir.File("swap")}, {"buffer_count", "auto"}}}}},
        {"strata", {{"device_memory", "64M"}, {"cpu_memory", std::stoull(cpu_memory)}}}};
    std::ofstream(cfg) << c.dump();
    return cfg;
  };
  const testing::CommandResult low = RunCommand(
      Strata("train --config " + config("1048576") + " --init tiny --steps 2 --seq-len 32"));
  ASSERT_EQ(low.exit_code, 1) << low.out << low.err;
  EXPECT_THAT(low.err, HasSubstr("strata.cpu_memory = 1 MiB"));
  EXPECT_THAT(low.err, HasSubstr("pinned cpu"));  // the table
  const size_t at = low.err.find("at least ");
  ASSERT_NE(at, std::string::npos) << low.err;
  const uint64_t minimum = std::stoull(low.err.substr(at + 9));
  const testing::CommandResult ok =
      RunCommand(Strata("train --config " + config(std::to_string(minimum)) +
                        " --init tiny --steps 2 --seq-len 32 --json"));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(j["losses"].size(), 2u);
  EXPECT_LE(j["planned_bytes"]["pinned_cpu"].get<uint64_t>() +
                j["planned_bytes"]["pageable_cpu"].get<uint64_t>(),
            minimum);
  EXPECT_LE(j["peak_bytes"]["pinned_cpu"].get<uint64_t>(),
            minimum - j["planned_bytes"]["pageable_cpu"].get<uint64_t>());
}

}  // namespace
}  // namespace strata
