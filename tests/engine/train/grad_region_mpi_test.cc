// The gradient region (engine/nvme/grad_region.h) on two ranks under mpirun: stage 3 with the
// optimizer on NVMe, the gradients through each rank's region (chunks of 4096 elements, two chunk
// buffers) against the same run with them in pinned CPU memory — bit-identical parameters and
// losses on every rank, gradient accumulation 2, fp32 with clipping and bf16 without, the
// overlapped step on and off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/engine/comm/mpi_test_main.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::SameBits;
using ::strata::testing::ScratchDir;

struct RegionRun {
  DType dtype;
  double clip;
  bool overlap;
};

std::vector<std::vector<float>> Train(Communicator& comm, const RegionRun& run,
                                      const testing::TokenData& data, uint64_t chunk_bytes,
                                      std::vector<float>* losses) {
  ScratchDir dir;
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), run.dtype);
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
      " \"stage3_param_persistence_threshold\": 200,"
      " \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false},"
      " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
      dir.path().string() + "\", \"pin_memory\": false, \"buffer_count\": 2}";
  std::string extra = run.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
  extra += "\"strata\": {\"nvme_grad_chunk\": " + std::to_string(chunk_bytes) +
           ", \"overlap_step\": " + (run.overlap ? "true" : "false") + "},";
  Config config = testing::MakeConfig(data.batch, 2, zero, extra, comm.world_size(), run.clip);
  EngineInit init;
  init.init_param = testing::TestInit(17);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk());
  if (!engine.ok()) return {};
  // Rank r trains on micro-batches r, r + world, ...
  return testing::TrainAndGather(**engine, data, 3, 2, losses, static_cast<size_t>(comm.rank()),
                                 static_cast<size_t>(comm.world_size()));
}

TEST(EngineGradRegionMpiTest, GradientsThroughNvmeEqualTheInMemoryPlacementBitwise) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const testing::TokenData data =
      testing::RandomTokens(41, 6 * static_cast<size_t>(comm.world_size()), 2, 16, 256);
  for (const RegionRun& run :
       {RegionRun{DType::kFloat32, 0.05, false}, RegionRun{DType::kFloat32, 0.05, true},
        RegionRun{DType::kBFloat16, 0.0, true}}) {
    std::vector<float> mem_losses, nvme_losses;
    const auto mem = Train(comm, run, data, 0, &mem_losses);
    const auto nvme = Train(comm, run, data, 16 << 10, &nvme_losses);
    ASSERT_FALSE(mem.empty());
    EXPECT_TRUE(SameBits(mem, nvme))
        << DTypeName(run.dtype) << " clip " << run.clip << (run.overlap ? " overlap" : " serial")
        << " rank " << comm.rank();
    EXPECT_EQ(mem_losses, nvme_losses);
  }
}

}  // namespace
}  // namespace strata
