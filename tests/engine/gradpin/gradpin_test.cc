// Stages 2-3 with the optimizer offloaded (cpu / nvme) reduce each parameter's shard straight into
// the pinned host gradient partition (engine/zero/grad/grad_reducer.h: Note [Reducing into host
// memory]), with no device fp32 gradient partition for the host part. A tiny Llama trained 3 steps
// at stage 2/3 x cpu/nvme x fp32/bf16 x gradient_accumulation 1/2 x ratio 1/0.5 (cpu) ends with the
// bits of the optimizer on the device (stage 0 and stage 2/3 with offload none), through the
// overlapped and the serial step, with overlap_comm on and off; the device bytes drop by 16 B (not
// 12 B) per host-partition element against the optimizer on the device, the D2H bytes are each
// micro-batch's reduced host shards, and the memory plan moves by the same bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/optim/partial_offload.h"
#include "engine/plan/memory_plan.h"
#include "engine/zero/grad/grad_reducer.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using Masters = std::vector<std::vector<float>>;

constexpr int kSteps = 3;
constexpr int64_t kSubGroup = 60000;  // the tiny model in >= 4 sub-groups (ratio 0.5 splits it)

struct Spec {
  int stage = 2;
  std::string opt = "cpu";  // offload_optimizer.device: none, cpu, nvme
  DType dtype = DType::kFloat32;
  int64_t gas = 1;
  double ratio = 1.0;
  bool overlap_comm = false;
  bool overlap_step = true;  // strata.overlap_step
  int64_t bucket = 5000;     // reduce_bucket_size: staging chunks smaller than the big shards
};

std::string ZeroKeys(const Spec& s, const std::string& nvme_dir) {
  std::string z = "\"stage\": " + std::to_string(s.stage) +
                  ", \"sub_group_size\": " + std::to_string(kSubGroup) +
                  ", \"reduce_bucket_size\": " + std::to_string(s.bucket) +
                  ", \"overlap_comm\": " + (s.overlap_comm ? "true" : "false");
  if (s.opt == "cpu") {
    z += ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": false, \"ratio\": " +
         std::to_string(s.ratio) + "}";
  } else if (s.opt == "nvme") {
    z += ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" + nvme_dir +
         "\", \"pin_memory\": false, \"buffer_count\": 2}";
  }
  if (s.stage == 3) z += ", \"stage3_param_persistence_threshold\": 200";
  return z;
}

struct EngineRun {
  Config config;
  std::unique_ptr<testing::ScratchDir> dir;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

Result<EngineRun> MakeRun(const Spec& s) {
  EngineRun r;
  r.dir = std::make_unique<testing::ScratchDir>();
  std::string extra = s.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "";
  // nvme: the gradients in the pinned partition this file is about (strata.nvme_grad_chunk 0;
  // tests/engine/train/grad_region_engine_test.cc has them on NVMe).
  std::string strata;
  if (!s.overlap_step) strata += "\"overlap_step\": false";
  if (s.opt == "nvme") strata += std::string(strata.empty() ? "" : ", ") + "\"nvme_grad_chunk\": 0";
  if (!strata.empty()) extra += "\"strata\": {" + strata + "},";
  r.config = testing::MakeConfig(2, s.gas, ZeroKeys(s, r.dir->File("swap")), extra);
  r.device = testing::MakeHostDevice();
  r.comm = testing::MakeLocalComm();
  r.model = testing::MakeTinyModel(r.device.get(), s.dtype);
  EngineInit init;
  init.init_param = testing::TestInit(11);
  STRATA_ASSIGN_OR_RETURN(r.engine,
                          Engine::Initialize(*r.model, r.config, *r.comm, *r.device, init));
  return r;
}

const testing::TokenData& Data() {
  static const testing::TokenData data = testing::RandomTokens(5, 2 * kSteps * 2, 2, 16, 256);
  return data;
}

struct Trained {
  Masters masters;
  std::vector<float> losses;
  std::vector<double> grad_norms;
};

Trained Train(const Spec& s) {
  Trained out;
  Result<EngineRun> r = MakeRun(s);
  EXPECT_THAT(r.status(), IsOk());
  if (!r.ok()) return out;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> losses;
    out.masters = testing::TrainAndGather(*r->engine, Data(), 1, s.gas, &losses,
                                          static_cast<size_t>(step * s.gas));
    out.losses.insert(out.losses.end(), losses.begin(), losses.end());
    out.grad_norms.push_back(r->engine->stats().last_grad_norm);
  }
  return out;
}

// The optimizer on the device, cached per dtype and accumulation (every case compares with it).
const Trained& Reference(int stage, DType dtype, int64_t gas) {
  static std::map<std::tuple<int, int, int64_t>, Trained> cache;
  const auto key = std::make_tuple(stage, static_cast<int>(dtype), gas);
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.emplace(key, Train({.stage = stage, .opt = "none", .dtype = dtype, .gas = gas}))
             .first;
  }
  return it->second;
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameRun(const Trained& got, const Trained& want, const std::string& what) {
  ASSERT_FALSE(got.masters.empty()) << what;
  EXPECT_TRUE(testing::SameBits(got.masters, want.masters)) << what;
  EXPECT_TRUE(SameBits(got.losses, want.losses)) << what;
  EXPECT_TRUE(SameBits(got.grad_norms, want.grad_norms)) << what;
}

using MatrixParam = std::tuple<int, const char*, DType, int64_t, double>;

class GradPinMatrixTest : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(GradPinMatrixTest, GivesTheBitsOfTheOptimizerOnTheDevice) {
  const auto [stage, opt, dtype, gas, ratio] = GetParam();
  const Trained got =
      Train({.stage = stage, .opt = opt, .dtype = dtype, .gas = gas, .ratio = ratio});
  ExpectSameRun(got, Reference(0, dtype, gas), "vs stage 0");
  ExpectSameRun(got, Reference(stage, dtype, gas), "vs offload none at the same stage");
  EXPECT_GT(got.grad_norms.back(), 0.0);
}

std::string MatrixName(const ::testing::TestParamInfo<MatrixParam>& i) {
  const auto [stage, opt, dtype, gas, ratio] = i.param;
  return "stage" + std::to_string(stage) + "_" + std::string(opt) + "_" +
         (dtype == DType::kBFloat16 ? "bf16" : "fp32") + "_gas" + std::to_string(gas) + "_ratio" +
         std::to_string(static_cast<int>(ratio * 100));
}

INSTANTIATE_TEST_SUITE_P(Cpu, GradPinMatrixTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values("cpu"),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(int64_t{1}, int64_t{2}),
                                            ::testing::Values(1.0, 0.5)),
                         MatrixName);
// Partial offload (ratio < 1) is cpu only.
INSTANTIATE_TEST_SUITE_P(Nvme, GradPinMatrixTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values("nvme"),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(int64_t{1}, int64_t{2}),
                                            ::testing::Values(1.0)),
                         MatrixName);

// overlap_comm (the reduce on the comm stream) and the serial step (strata.overlap_step false)
// give the same bits as the default.
TEST(GradPinTest, OverlapCommAndSerialStepGiveTheSameBits) {
  for (int stage : {2, 3}) {
    for (const char* opt : {"cpu", "nvme"}) {
      SCOPED_TRACE(std::string("stage ") + std::to_string(stage) + " " + opt);
      const Spec base{.stage = stage, .opt = opt, .dtype = DType::kBFloat16, .gas = 2};
      const Trained off = Train(base);
      Spec on = base;
      on.overlap_comm = true;
      ExpectSameRun(Train(on), off, "overlap_comm on");
      on.bucket = 0;  // every slot alone, staging of the largest shard
      ExpectSameRun(Train(on), off, "overlap_comm on, reduce_bucket_size 0");
      Spec serial = base;
      serial.overlap_step = false;
      ExpectSameRun(Train(serial), off, "overlap_step off");
    }
  }
}

// Elements of the host part of the partition the reducer copies: each slice's shard past the
// split (padding included, alignment gaps not).
uint64_t HostShardNumel(const PartitionLayout& layout, size_t split) {
  uint64_t n = 0;
  for (const ShardSlice& s : layout.slices()) {
    const size_t end = s.flat_offset + s.shard_numel;
    if (end > split) n += end - std::max(s.flat_offset, split);
  }
  return n;
}

uint64_t TierOf(const MemoryPlan& p, PlanTier t) { return p.tier_bytes[static_cast<size_t>(t)]; }

// Both CPU tiers of the plan (pin_memory false puts the pinned buffers in pageable).
// The CPU bytes the engine's own tiers hold (EngineStats::cpu_bytes): the whole-run items of both
// CPU tiers; the items held in one phase of the run (the speculative overlapped step's kept
// copies, Initialize's values, malloc'd as they are needed) no engine tier allocates.
uint64_t PlanCpuBytes(const MemoryPlan& p) {
  uint64_t b = 0;
  for (const PlanItem& i : p.items) {
    if (i.phase == PlanPhase::kRun &&
        (i.tier == PlanTier::kPinnedCpu || i.tier == PlanTier::kPageableCpu)) {
      b += i.bytes;
    }
  }
  return b;
}
uint64_t Round256(uint64_t b) { return (b + 255) / 256 * 256; }

// Against the optimizer on the device (master + moments + gradient partition: 16 B per element)
// the host part [split, n) now leaves nothing on the device: 16 B per element less, where a
// device-resident gradient partition left 12 B less. The plan moves by the same bytes, the
// staging buffers are charged as planned, and one step's D2H bytes are the reduced host shards of
// each micro-batch, as planned.
TEST(GradPinTest, DeviceBytesPlanAndCopiesFollowTheLayout) {
  for (int stage : {2, 3}) {
    for (const char* opt : {"cpu", "nvme"}) {
      for (double ratio : {1.0, 0.5}) {
        if (std::string(opt) == "nvme" && ratio < 1.0) continue;
        SCOPED_TRACE(std::string("stage ") + std::to_string(stage) + " " + opt + " ratio " +
                     std::to_string(ratio));
        const int64_t gas = 2;
        Result<EngineRun> off = MakeRun({.stage = stage, .opt = opt, .gas = gas, .ratio = ratio});
        Result<EngineRun> dev = MakeRun({.stage = stage, .opt = "none", .gas = gas});
        Result<EngineRun> one = MakeRun({.stage = 1, .opt = opt, .gas = gas, .ratio = ratio});
        ASSERT_THAT(off.status(), IsOk());
        ASSERT_THAT(dev.status(), IsOk());
        ASSERT_THAT(one.status(), IsOk());
        const PartitionLayout& layout = off->engine->layout();
        const size_t n = layout.partition_numel();
        const size_t split =
            PartialOffloadSplit(off->config.zero, layout.SubGroups(static_cast<size_t>(kSubGroup)));
        if (ratio < 1.0) {
          ASSERT_GT(split, 0u);
          ASSERT_LT(split, n);
        } else {
          ASSERT_EQ(split, 0u);
        }
        const EngineStats& so = off->engine->stats();
        const EngineStats& sd = dev->engine->stats();
        EXPECT_EQ(sd.device_bytes - so.device_bytes, 16 * (n - split));

        // The plan: the same device bytes off (as the arena rounds them); and the staging buffers
        // are the CPU bytes the engine and the plan add over stage 1 (same layout at world 1,
        // where the gradient partition crosses once at the step).
        std::vector<uint64_t> numels;
        for (const ShardSlice& s : layout.slices()) numels.push_back(s.numel);
        const PlanOptions po{.world = 1, .rank = 0, .include_activations = false};
        Result<MemoryPlan> po_off = PlanEngineMemory(ShapeFromNumels(numels), off->config, po);
        Result<MemoryPlan> po_dev = PlanEngineMemory(ShapeFromNumels(numels), dev->config, po);
        Result<MemoryPlan> po_one = PlanEngineMemory(ShapeFromNumels(numels), one->config, po);
        ASSERT_THAT(po_off.status(), IsOk());
        ASSERT_THAT(po_dev.status(), IsOk());
        ASSERT_THAT(po_one.status(), IsOk());
        const uint64_t planned_drop =
            TierOf(*po_dev, PlanTier::kDevice) - TierOf(*po_off, PlanTier::kDevice);
        const uint64_t device_part = split == 0 ? 0 : Round256(12 * split) + Round256(4 * split);
        EXPECT_EQ(planned_drop, Round256(16 * n) - device_part) << FormatPlanItems(*po_off);
        // Four buffers of half the 5000-float bucket, raised to the 4096-float minimum: 16 KiB.
        const uint64_t staging_bytes = 4 * 16384;
        EXPECT_EQ(so.cpu_bytes - one->engine->stats().cpu_bytes, staging_bytes);
        EXPECT_EQ(PlanCpuBytes(*po_off) - PlanCpuBytes(*po_one), staging_bytes)
            << FormatPlanItems(*po_off);
        size_t max_shard = 1;
        for (const ShardSlice& s : layout.slices()) max_shard = std::max(max_shard, s.shard_numel);
        ASSERT_GT(max_shard, 5000u);  // the staging chunks are smaller than the largest shard
        EXPECT_EQ(GradStagingNumel(max_shard, 5000, 1), 4096u);
        EXPECT_EQ(GradStagingNumel(max_shard, 20000, 1), 10000u);  // half a bucket above it
        const uint64_t host_bytes = gas * 4 * HostShardNumel(layout, split);
        EXPECT_EQ(po_off->traffic.device_to_host_bytes, host_bytes);

        // One step: the reducer's D2H copies are the breakdown's.
        testing::TrainAndGather(*off->engine, Data(), 1, gas);
        EXPECT_EQ(off->engine->last_breakdown().d2h_bytes, host_bytes);
        EXPECT_GT(off->engine->last_breakdown().d2h_ms, 0.0);
      }
    }
  }
}

// Stage 1 keeps its device gradient partition and the one D2H at the step.
TEST(GradPinTest, StageOneStillCopiesThePartitionAtTheStep) {
  Result<EngineRun> r = MakeRun({.stage = 1, .opt = "cpu"});
  ASSERT_THAT(r.status(), IsOk());
  testing::TrainAndGather(*r->engine, Data(), 1, 1);
  EXPECT_EQ(r->engine->last_breakdown().d2h_bytes, 4 * r->engine->layout().partition_numel());
}

}  // namespace
}  // namespace strata
