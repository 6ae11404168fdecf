// Swap chunks in the engine (strata.swap_chunk_bytes, engine/nvme/swap_chunks.h): the optimizer
// on NVMe with sub_group_size 3000 cut into 1024-element chunks (3000 is larger than the chunk and
// not a multiple of it, so chunks cut parameters and end short at sub-group ends) trains the tiny
// Llama at stage 3 bitwise as the optimizer in CPU memory does — fp32, bf16, fp16 with overflow
// (steps skipped), clipping that triggers and none, gradient accumulation 2, the step overlapped
// with backward (chunk by chunk, as each chunk's parameters are reduced) and serial, parameters on
// the device and on NVMe (fp16 with overflow and clipping too). World 2 is in
// step_overlap_mpi_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "models/llama/model/llama_model.h"
#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/inf_injector.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::OverlapCase;
using testing::OverlapRun;
using testing::OverlapRunOptions;
using testing::SameBits;

constexpr uint64_t kChunk = 12 * 1024;  // 1024 elements of master + exp_avg + exp_avg_sq
constexpr double kClipTriggers = 1e-4;

class NvmeChunksEngineTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(NvmeChunksEngineTest, ChunkedNvmeEqualsTheCpuPlacementBitwise) {
  const OverlapCase nvme = GetParam();
  OverlapCase cpu = nvme;
  cpu.opt = "cpu";
  cpu.chunk_bytes = 0;
  if (std::string(cpu.param) == "nvme") cpu.param = "cpu";
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  const bool fp16 = nvme.dtype == DType::kFloat16;
  // fp16: steps 1 and 3 overflow (+Inf in the LM head's gradient slot before its backward:
  // tests/support/inf_injector.h) and are skipped.
  testing::InfInjector inject(nullptr);
  OverlapRunOptions o;
  o.steps = 4;
  if (fp16) {
    o.hooks = &inject;
    o.hook_module = [](llama::LlamaForCausalLM& m) -> nn::Module* { return &m.lm_head(); };
    o.arg = &inject;
    o.before_step = [](int step, void* arg) {
      static_cast<testing::InfInjector*>(arg)->armed = step % 2 == 1;
    };
  }
  o.nvme_dir = dir.File("cpu");
  const OverlapRun ref = testing::RunOverlapCase(*comm, cpu, false, o);
  EXPECT_EQ(ref.skipped, fp16 ? 2 : 0);
  for (const bool overlap : {false, true}) {
    o.nvme_dir = dir.File(overlap ? "overlap" : "serial");
    const OverlapRun got = testing::RunOverlapCase(*comm, nvme, overlap, o);
    const std::string name = testing::OverlapCaseName(nvme) + (overlap ? " overlapped" : "");
    EXPECT_TRUE(SameBits(ref.masters, got.masters)) << name;
    EXPECT_TRUE(SameBits({ref.losses}, {got.losses})) << name;
    EXPECT_EQ(ref.skipped, got.skipped) << name;
    if (overlap) {
      EXPECT_GT(got.overlapped, 0) << name << ": no chunk was updated during backward";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stage3, NvmeChunksEngineTest,
    ::testing::Values(
        OverlapCase{3, "nvme", "none", DType::kFloat32, 0, false, 2, kChunk},
        OverlapCase{3, "nvme", "none", DType::kBFloat16, kClipTriggers, false, 2, kChunk},
        OverlapCase{3, "nvme", "none", DType::kFloat16, kClipTriggers, true, 2, kChunk},
        OverlapCase{3, "nvme", "nvme", DType::kBFloat16, 0, false, 2, kChunk},
        // Parameters on NVMe written back chunk by chunk (engine/optim/param_copy_target.h):
        // overflows roll the early write-backs back (shard fills ended early), clipping redoes
        // them.
        OverlapCase{3, "nvme", "nvme", DType::kFloat16, kClipTriggers, true, 2, kChunk}),
    [](const ::testing::TestParamInfo<OverlapCase>& i) {
      return testing::OverlapCaseName(i.param);
    });

}  // namespace
}  // namespace strata
