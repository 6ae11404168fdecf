#include "tests/engine/overlap/overlap_cases.h"

#include <gtest/gtest.h>

#include "tests/support/status_matchers.h"

namespace strata::testing {

std::string OverlapCaseName(const OverlapCase& c) {
  std::string n = "stage" + std::to_string(c.stage) + "_" + c.opt;
  if (c.stage == 3) n += std::string("_param_") + c.param;
  n += "_" + std::string(DTypeName(c.dtype));
  n += c.clip == 0 ? "_noclip" : (c.clip < 1 ? "_clips" : "_clipidle");
  n += c.overlap_comm ? "_overlapcomm" : "";
  if (c.chunk_bytes != 0) n += "_chunk" + std::to_string(c.chunk_bytes);
  if (c.gas != 2) n += "_gas" + std::to_string(c.gas);
  if (!c.deferred) n += "_nodefer";
  if (c.persistence != 200) n += "_persist" + std::to_string(c.persistence);
  return n;
}

void ExpectClipAsNamed(const OverlapCase& c, const std::vector<double>& norms) {
  for (double norm : norms) {
    if (c.clip == kClipTriggers) {
      EXPECT_GT(norm, c.clip) << OverlapCaseName(c);
    }
    if (c.clip == kClipIdle) {
      EXPECT_LT(norm, c.clip) << OverlapCaseName(c);
    }
  }
}

namespace {

std::string ZeroKeys(const OverlapCase& c, const std::string& nvme_dir) {
  std::string z = "\"stage\": " + std::to_string(c.stage) +
                  ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 2000, \"overlap_comm\": " +
                  (c.overlap_comm ? "true" : "false") + ", \"offload_optimizer\": {\"device\": \"" +
                  c.opt + "\", \"pin_memory\": false";
  if (std::string(c.opt) == "nvme") {
    z += ", \"nvme_path\": \"" + nvme_dir + "\", \"buffer_count\": 2";
  }
  z += "}";
  if (c.stage == 3) {
    z += ", \"stage3_param_persistence_threshold\": " + std::to_string(c.persistence) +
         ", \"offload_param\": {\"device\": \"" + std::string(c.param) +
         "\", \"pin_memory\": false";
    if (std::string(c.param) == "nvme") {  // a small max_in_cpu: most shards live on NVMe
      z += ", \"nvme_path\": \"" + nvme_dir + "/param\", \"max_in_cpu\": 2000";
    }
    z += "}";
  }
  return z;
}

std::string ExtraKeys(const OverlapCase& c, bool overlap) {
  std::string e = std::string("\"strata\": {\"overlap_step\": ") + (overlap ? "true" : "false");
  if (c.chunk_bytes != 0) e += ", \"swap_chunk_bytes\": " + std::to_string(c.chunk_bytes);
  if (!c.deferred) e += ", \"deferred_updates\": false";
  e += "},";
  if (c.dtype == DType::kBFloat16) e += "\"bf16\": {\"enabled\": true},";
  if (c.dtype == DType::kFloat16) {
    e += "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2},";
  }
  return e;
}

}  // namespace

OverlapRun RunOverlapCase(Communicator& comm, const OverlapCase& c, bool overlap,
                          const OverlapRunOptions& options) {
  OverlapRun out;
  auto device = MakeHostDevice();
  auto model = MakeTinyModel(device.get(), c.dtype);
  Config config = MakeConfig(2, c.gas, ZeroKeys(c, options.nvme_dir), ExtraKeys(c, overlap),
                             comm.world_size(), c.clip);
  EngineInit init;
  init.init_param = TestInit(23);
  auto engine = Engine::Initialize(*model, config, comm, *device, init);
  EXPECT_THAT(engine.status(), IsOk()) << OverlapCaseName(c);
  if (!engine.ok()) return out;
  Engine& e = **engine;
  nn::Module* hooked = nullptr;
  if (options.hooks != nullptr && options.hook_module != nullptr) {
    hooked = options.hook_module(*model);
    hooked->AddHooks(options.hooks);
  }
  const TokenData data = RandomTokens(41, 64, 2, 16, 256);
  const size_t world = static_cast<size_t>(comm.world_size());
  for (int s = 0; s < options.steps; ++s) {
    if (options.before_step != nullptr) options.before_step(s, options.arg);
    const size_t first = static_cast<size_t>(comm.rank()) + world * c.gas * s;
    if (options.gather_each_step) {
      out.masters = TrainAndGather(e, data, 1, c.gas, &out.losses, first, world);
    } else {  // TrainAndGather's loop without the gather
      for (int64_t m = 0; m < c.gas; ++m) {
        EXPECT_THAT(e.Forward(data.Batch(first + world * m)), IsOk());
        out.losses.push_back(e.Loss().value());
        EXPECT_THAT(e.Backward(), IsOk());
        EXPECT_THAT(e.Step(), IsOk());
      }
    }
    out.norms.push_back(e.stats().last_grad_norm);
  }
  if (!options.gather_each_step) out.masters = TrainAndGather(e, data, 0, c.gas, nullptr, 0, 1);
  if (hooked != nullptr) hooked->RemoveHooksRecursive(options.hooks);
  out.overlapped = e.overlapped_sub_groups();
  out.param_write_backs = e.early_param_write_backs();
  out.deferred = e.deferred_sub_groups();
  out.skipped = e.stats().skipped_steps;
  out.sub_groups = static_cast<int64_t>(e.layout().SubGroups(3000).size());
  return out;
}

}  // namespace strata::testing
