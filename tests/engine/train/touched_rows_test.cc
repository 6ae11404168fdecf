// Stage 3 at one rank moves only the embedding rows a batch touches (Note [Rows only] in
// engine/zero/hooks/zero3_hooks.cc, Note [Rows to host] and Note [Rows to the region] in
// engine/zero/grad/grad_reducer.cc): the forward gathers those rows, the backward gathers nothing
// for the embedding, and its gradient leaves the device as those rows, into the pinned partition
// (offload_optimizer cpu) or the NVMe gradient region (offload_optimizer nvme). Counted exactly
// here from the step breakdown's bytes; with accumulation the values stay bitwise stage 0's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

constexpr uint64_t kThreshold = 200;  // stage3_param_persistence_threshold: norms stay gathered

struct Bytes {
  uint64_t h2d = 0, d2h = 0;
};

// offload_optimizer on the CPU.
std::string CpuOptimizer() { return "{\"device\": \"cpu\", \"pin_memory\": false}"; }
// offload_optimizer on NVMe under `dir`, its gradients in the NVMe region in chunks of 4096
// elements (the tiny model's embedding spans several) with two chunk buffers, so chunks are
// written out and read back within a pass.
std::string NvmeOptimizer(const testing::ScratchDir& dir) {
  return "{\"device\": \"nvme\", \"nvme_path\": \"" + dir.path().string() +
         "\", \"pin_memory\": false, \"buffer_count\": 2}";
}
constexpr char kRegion[] = "\"strata\": {\"nvme_grad_chunk\": 16384},";

// Stage 3, parameters on the CPU, the optimizer where `optimizer` says (`extra`: more top-level
// keys), no prefetch (each gather is the module's own).
Bytes StepBytes(bool tied, const testing::TokenData& data, int steps,
                const std::string& optimizer = CpuOptimizer(), const std::string& extra = "") {
  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32, tied);
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
      " \"stage3_prefetch_bucket_size\": 0, \"stage3_param_persistence_threshold\": " +
      std::to_string(kThreshold) + ", \"offload_optimizer\": " + optimizer +
      ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false}";
  Config config = testing::MakeConfig(data.batch, 1, zero, extra);
  EngineInit init;
  init.init_param = testing::TestInit(5);
  Result<std::unique_ptr<Engine>> e = Engine::Initialize(*model, config, *comm, *device, init);
  EXPECT_THAT(e.status(), IsOk());
  if (!e.ok()) return {};
  Bytes b;
  for (int s = 0; s < steps; ++s) {
    EXPECT_THAT((*e)->Forward(data.Batch(static_cast<size_t>(s))), IsOk());
    EXPECT_THAT((*e)->Backward(), IsOk());
    EXPECT_THAT((*e)->Step(), IsOk());
  }
  b.h2d = (*e)->last_breakdown().h2d_bytes;
  b.d2h = (*e)->last_breakdown().d2h_bytes;
  return b;
}

// The model's elements: all, those gathered per use, those kept gathered (persistent).
struct Elements {
  uint64_t all = 0, gathered = 0, persistent = 0;
};
Elements CountElements(const llama::LlamaForCausalLM& model) {
  Elements e;
  for (const nn::Parameter* p : model.NamedParameters()) {
    const uint64_t n = static_cast<uint64_t>(p->numel());
    e.all += n;
    (n <= kThreshold ? e.persistent : e.gathered) += n;
  }
  return e;
}

TEST(TouchedRowsTest, TheEmbeddingCrossesTheLinkAsTheRowsOfTheBatchsTokensOnly) {
  const testing::TokenData data = testing::RandomTokens(17, 3, 2, 16, 256);
  auto probe_device = testing::MakeHostDevice();
  auto probe = testing::MakeTinyModel(probe_device.get(), DType::kFloat32, false);
  const llama::LlamaConfig& c = probe->config();
  const uint64_t emb = static_cast<uint64_t>(c.vocab_size * c.hidden_size);
  const auto [all, gathered, persistent] = CountElements(*probe);
  // The last step's rows.
  const std::vector<int32_t>& ids = data.ids[2];
  const uint64_t rows = std::set<int32_t>(ids.begin(), ids.end()).size();
  ASSERT_LT(rows, static_cast<uint64_t>(c.vocab_size));  // the test means something

  const Bytes got = StepBytes(false, data, 3);
  // Down: every gradient once, the embedding's as its rows.
  EXPECT_EQ(got.d2h, 4 * (all - emb + rows * c.hidden_size));
  // Up: every gathered matrix in forward and again in backward, except the embedding: its rows in
  // forward, nothing in backward; the persistent norms once, after the step.
  EXPECT_EQ(got.h2d, 4 * (2 * (gathered - emb) + rows * c.hidden_size + persistent));

  // The same with the gradients in the NVMe region (Note [Rows to the region]).
  testing::ScratchDir dir;
  const Bytes region = StepBytes(false, data, 3, NvmeOptimizer(dir), kRegion);
  EXPECT_EQ(region.d2h, got.d2h);
  EXPECT_EQ(region.h2d, got.h2d);

  // A tied embedding is the LM head's weight too: it moves whole, down once and up three times
  // (the embedding's forward, the head's forward and backward; not the embedding's backward).
  const Bytes tied = StepBytes(true, data, 3);
  auto tied_device = testing::MakeHostDevice();
  const Elements t =
      CountElements(*testing::MakeTinyModel(tied_device.get(), DType::kFloat32, true));
  EXPECT_EQ(tied.d2h, 4 * t.all);
  EXPECT_EQ(tied.h2d, 4 * (2 * (t.gathered - emb) + 3 * emb + t.persistent));
}

// With gradient accumulation the first micro-batch's embedding gradient goes down as rows and
// the second's is added whole (its slot zeroed whole): still stage 0's bits, in pinned memory and
// in the NVMe region.
TEST(TouchedRowsTest, AccumulatedMicroBatchesStayBitwiseStageZero) {
  const testing::TokenData data = testing::RandomTokens(19, 6, 2, 16, 256);
  auto run = [&](const std::string& zero, const std::string& extra) {
    auto device = testing::MakeHostDevice();
    auto comm = testing::MakeLocalComm();
    auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
    Config config = testing::MakeConfig(data.batch, 2, zero, extra);
    EngineInit init;
    init.init_param = testing::TestInit(9);
    Result<std::unique_ptr<Engine>> e = Engine::Initialize(*model, config, *comm, *device, init);
    EXPECT_THAT(e.status(), IsOk());
    std::vector<float> losses;
    std::vector<std::vector<float>> masters;
    if (e.ok()) masters = testing::TrainAndGather(**e, data, 3, 2, &losses);
    return std::make_pair(masters, losses);
  };
  const auto base = run("\"stage\": 0", "");
  const std::string stage3 =
      "\"stage\": 3, \"sub_group_size\": 3000, \"stage3_param_persistence_threshold\": 200,"
      " \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false},"
      " \"offload_optimizer\": ";
  const auto got = run(stage3 + CpuOptimizer(), "");
  ASSERT_FALSE(base.first.empty());
  EXPECT_TRUE(testing::SameBits(base.first, got.first));
  EXPECT_EQ(base.second, got.second);
  // The NVMe region: rows in the first micro-batch, added whole in the second, its chunks cycling
  // through two buffers.
  testing::ScratchDir dir;
  const auto region = run(stage3 + NvmeOptimizer(dir), kRegion);
  EXPECT_TRUE(testing::SameBits(base.first, region.first));
  EXPECT_EQ(base.second, region.second);
}

}  // namespace
}  // namespace strata
