#include "tests/engine/checkpoint/checkpoint_test_util.h"

#include <gtest/gtest.h>

namespace strata::testing {

std::string PlacementName(const Placement& p) {
  return "stage" + std::to_string(p.stage) + "_" + p.offload + "_" +
         std::string(DTypeName(p.dtype));
}

EngineRun MakeRun(Communicator& comm, const Placement& p, uint64_t init_seed, int64_t gas,
                  int64_t micro_batch, double clip, const std::string& optimizer_params) {
  EngineRun r;
  r.device = MakeHostDevice();
  r.model = MakeTinyModel(r.device.get(), p.dtype);
  const std::string dtype_keys = p.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true},"
                                 : p.dtype == DType::kFloat16
                                     ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12},"
                                     : "";
  Config config =
      MakeConfig(micro_batch, gas,
                 "\"stage\": " + std::to_string(p.stage) +
                     ", \"sub_group_size\": 5000, \"offload_optimizer\": {\"device\": \"" +
                     p.offload + "\", \"pin_memory\": false}",
                 dtype_keys, comm.world_size(), clip, optimizer_params);
  EngineInit init;
  init.init_param = TestInit(init_seed);
  Result<std::unique_ptr<Engine>> e = Engine::Initialize(*r.model, config, comm, *r.device, init);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (e.ok()) r.engine = std::move(e).value();
  return r;
}

std::vector<std::vector<float>> ReadAllArrays(const std::string& dir, const std::string& tag) {
  std::vector<std::vector<float>> out;
  Result<CheckpointReader> r = CheckpointReader::Open(dir, tag);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return out;
  for (size_t i = 0; i < r->manifest().params.size(); ++i) {
    const size_t n = r->manifest().params[i].numel;
    std::vector<float> v(3 * n);
    for (int a = 0; a < 3; ++a) {
      Status s = r->Read(i, static_cast<CheckpointArray>(a), 0, {v.data() + a * n, n});
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace strata::testing
