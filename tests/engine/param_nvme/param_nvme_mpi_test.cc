// offload_param.device = nvme on two ranks under mpirun (engine_param_nvme_mpi_world2): each rank's
// shards on NVMe, cycled through two small swap buffers, give the same parameters and losses bit
// for bit as the shards on the device, with the optimizer on the CPU and on NVMe, fp32 and bf16.
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

struct Outcome {
  std::vector<std::vector<float>> masters;
  std::vector<float> losses;
};

// Rank r trains on batches r, r + world, ...; the shards on `param` ("none" or "nvme").
Outcome Train(Communicator& comm, DType dtype, const char* opt, const char* param,
              const testing::TokenData& data) {
  testing::ScratchDir dir;
  auto device = testing::MakeHostDevice();
  auto model = testing::MakeTinyModel(device.get(), dtype);
  std::string zero =
      "\"stage\": 3, \"sub_group_size\": 5000, \"reduce_bucket_size\": 40000, "
      "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": \"" +
      std::string(opt) + "\", \"pin_memory\": false";
  if (std::string(opt) == "nvme") zero += ", \"nvme_path\": \"" + dir.File("opt") + "\"";
  zero +=
      "}, \"offload_param\": {\"device\": \"" + std::string(param) + "\", \"pin_memory\": false";
  if (std::string(param) == "nvme") {
    // A rank's largest shard has 24576 elements: two buffers of 25000 hold two.
    zero += ", \"nvme_path\": \"" + dir.File("param") +
            "\", \"buffer_count\": 2, \"buffer_size\": 25000, \"max_in_cpu\": 0";
  }
  zero += "}";
  const std::string dtype_keys = dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
  Config config = testing::MakeConfig(data.batch, 1, zero, dtype_keys, comm.world_size());
  EngineInit init;
  init.init_param = testing::TestInit(17);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk()) << zero;
  if (!engine.ok()) return {};
  Outcome o;
  o.masters =
      testing::TrainAndGather(**engine, data, 3, 1, &o.losses, static_cast<size_t>(comm.rank()),
                              static_cast<size_t>(comm.world_size()));
  if (std::string(param) == "nvme") {
    EXPECT_GT((*engine)->last_breakdown().nvme_read_bytes, 0u);
  }
  return o;
}

TEST(EngineParamNvmeMpiTest, ShardsOnNvmeEqualShardsOnTheDeviceBitwise) {
  Communicator& comm = testing::World();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2";
  const testing::TokenData data =
      testing::RandomTokens(31, static_cast<size_t>(3 * comm.world_size()), 2, 16, 256);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const char* opt : {"cpu", "nvme"}) {
      const Outcome base = Train(comm, dtype, opt, "none", data);
      const Outcome got = Train(comm, dtype, opt, "nvme", data);
      EXPECT_TRUE(SameBits(base.masters, got.masters)) << DTypeName(dtype) << " opt " << opt;
      EXPECT_EQ(base.losses, got.losses) << DTypeName(dtype) << " opt " << opt;
    }
  }
}

}  // namespace
}  // namespace strata
