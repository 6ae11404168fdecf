// strata.deferred_updates (Note [Deferred updates], engine/overlap/step_overlap_defer.cc): the
// sub-groups a step has left after the backward are updated during the next forward, each gather
// waiting for its own. Parameters, losses and gradient norms are bitwise those of the serial step
// (strata.overlap_step false) and of the overlapped step without deferral: stage 3, optimizer
// state on cpu and nvme, shards on cpu and nvme, fp32 / bf16 / fp16, a clip that triggers (the
// case where the overlapped step's speculation fails and everything is deferred), one that does
// not and none, gradient accumulation 2 and 1, the norms persistent or every parameter. The masters
// are gathered only after the last step, so each forward really runs with updates pending; the
// store refuses a read of a pending shard (InternalError), so a gather that did not wait would fail
// the run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/zero/store/param_fence.h"
#include "engine/zero/store/param_store.h"
#include "offload/device/registry.h"
#include "tests/engine/overlap/overlap_cases.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;
using testing::OverlapCase;
using testing::OverlapCaseName;
using testing::OverlapRun;
using testing::OverlapRunOptions;
using testing::SameBits;

using testing::kClipIdle;
using testing::kClipTriggers;

void ExpectSameRun(const OverlapRun& want, const OverlapRun& got, const std::string& what) {
  EXPECT_TRUE(SameBits(want.masters, got.masters)) << what << ": masters differ";
  ASSERT_EQ(want.losses.size(), got.losses.size()) << what;
  EXPECT_TRUE(SameBits({want.losses}, {got.losses})) << what << ": the compute-dtype copies differ";
  ASSERT_EQ(want.norms.size(), got.norms.size()) << what;
  for (size_t i = 0; i < want.norms.size(); ++i) {
    EXPECT_EQ(std::memcmp(&want.norms[i], &got.norms[i], sizeof(double)), 0)
        << what << ", step " << i << ": " << want.norms[i] << " vs " << got.norms[i];
  }
  EXPECT_EQ(want.skipped, got.skipped) << what;
}

class DeferredUpdatesTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(DeferredUpdatesTest, EqualTheSerialStepAndTheUndeferredOverlapBitwise) {
  const OverlapCase& c = GetParam();
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  OverlapRunOptions o;
  o.steps = 3;
  o.gather_each_step = false;
  o.nvme_dir = dir.File("serial");
  const OverlapRun serial = testing::RunOverlapCase(*comm, c, false, o);
  OverlapCase nodefer = c;
  nodefer.deferred = false;
  o.nvme_dir = dir.File("nodefer");
  const OverlapRun early = testing::RunOverlapCase(*comm, nodefer, true, o);
  o.nvme_dir = dir.File("deferred");
  const OverlapRun deferred = testing::RunOverlapCase(*comm, c, true, o);
  ASSERT_GE(serial.sub_groups, 4);
  EXPECT_EQ(serial.deferred, 0);
  EXPECT_EQ(early.deferred, 0);
  // A clip that triggers makes the overlapped step's speculation fail: after the first step
  // nothing is updated early and every update is deferred. Otherwise what is deferred is what
  // the worker had not reached when the backward ended (timing: not asserted).
  if (c.clip == kClipTriggers) {
    EXPECT_GE(deferred.deferred, (2 - deferred.skipped) * serial.sub_groups);
  }
  // Note [No speculation over NVMe state with deferral]: with the state on NVMe a step that can
  // change (a clip, fp16's overflow check) updates nothing during the backward, so it keeps no
  // copy; every step defers all its sub-groups. The undeferred overlap still speculates.
  const bool speculative = c.clip > 0 || c.dtype == DType::kFloat16;
  if (std::string(c.opt) == "nvme" && speculative) {
    EXPECT_EQ(deferred.overlapped, deferred.deferred)
        << "a sub-group was updated during a speculative backward";
    EXPECT_GE(deferred.deferred, (o.steps - deferred.skipped) * serial.sub_groups);
    if (c.clip == kClipIdle) {
      EXPECT_GT(early.overlapped, 0);
    }
  }
  std::printf("%s: %lld sub-group updates deferred, %lld in all\n", OverlapCaseName(c).c_str(),
              static_cast<long long>(deferred.deferred),
              static_cast<long long>(deferred.overlapped));
  ExpectSameRun(serial, deferred, "deferred vs serial");
  ExpectSameRun(early, deferred, "deferred vs overlapped without deferral");
  testing::ExpectClipAsNamed(c, serial.norms);
}

std::vector<OverlapCase> DeferredCases() {
  std::vector<OverlapCase> cases;
  const double clips[] = {0.0, kClipTriggers, kClipIdle};
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const char* const placements[][2] = {
      {"cpu", "cpu"}, {"cpu", "nvme"}, {"nvme", "cpu"}, {"nvme", "nvme"}};
  // Every placement with every dtype and every clip; every dtype with every clip.
  for (int p = 0; p < 4; ++p) {
    for (int d = 0; d < 3; ++d) {
      OverlapCase c;
      c.stage = 3;
      c.opt = placements[p][0];
      c.param = placements[p][1];
      c.dtype = dtypes[d];
      c.clip = clips[(p + d) % 3];
      c.overlap_comm = d == 1;
      cases.push_back(c);
    }
  }
  // Accumulation 1: every forward is the boundary's (the NVMe read-ahead of the next step and the
  // deferred updates meet in it).
  for (int p : {0, 3}) {
    OverlapCase c;
    c.stage = 3;
    c.opt = placements[p][0];
    c.param = placements[p][1];
    c.dtype = p == 0 ? DType::kBFloat16 : DType::kFloat16;
    c.clip = p == 0 ? 0.0 : kClipTriggers;
    c.gas = 1;
    cases.push_back(c);
  }
  // Swap chunks smaller than a sub-group and not dividing it: a parameter's shard can span two
  // chunks, and its gather waits for both.
  OverlapCase chunked;
  chunked.stage = 3;
  chunked.opt = "nvme";
  chunked.param = "nvme";
  chunked.dtype = DType::kBFloat16;
  chunked.clip = kClipTriggers;
  chunked.chunk_bytes = 12 * 1000;
  cases.push_back(chunked);
  // Every parameter persistent (DeepSpeed's default threshold), the embedding among them: its
  // re-gather at the next use takes every row, not the first micro-batch's (Note [Persistent rows
  // are every row] in engine/zero/hooks/zero3_hooks.cc).
  for (int p : {0, 3}) {
    OverlapCase c;
    c.stage = 3;
    c.opt = placements[p][0];
    c.param = placements[p][1];
    c.dtype = p == 0 ? DType::kFloat32 : DType::kBFloat16;
    c.clip = p == 0 ? 0.0 : kClipTriggers;
    c.persistence = 100000;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, DeferredUpdatesTest, ::testing::ValuesIn(DeferredCases()),
                         [](const auto& info) { return testing::OverlapCaseName(info.param); });

// A fence that holds back the parameters it is told to.
class HeldBack final : public ParamFence {
 public:
  explicit HeldBack(std::vector<size_t> pending) : pending_(std::move(pending)) {}
  bool Pending(size_t param) const override {
    for (size_t p : pending_) {
      if (p == param) return true;
    }
    return false;
  }
  Status Await(size_t param) override {
    std::erase(pending_, param);
    return Status::Ok();
  }
  Status Poll() override { return Status::Ok(); }

 private:
  std::vector<size_t> pending_;
};

// The store's side of the fence on every tier: a read of a pending shard is refused (Internal,
// naming the parameter), Prefetch skips it, and once the fence lets it go it reads the bytes
// written last.
TEST(DeferredUpdatesStoreTest, APendingShardCannotBeRead) {
  for (Tier tier : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
    SCOPED_TRACE(std::string(TierName(tier)));
    testing::ScratchDir dir;
    auto device = testing::MakeHostDevice();
    const std::vector<size_t> numels = {300, 500, 200};
    PartitionLayout layout = PartitionLayout::Create(numels, 1, 0, 64).value();
    ParamStoreOptions o;
    o.tier = tier;
    o.device = device.get();
    o.layout = &layout;
    o.dtype = DType::kFloat32;
    o.pin_memory = false;
    o.swapper.nvme_paths = {dir.path().string()};
    o.swapper.pin_memory = false;
    o.swapper.buffer_count = 2;
    o.swapper.buffer_size = 500;
    Result<std::unique_ptr<ParamStore>> store = ParamStore::Create(o);
    ASSERT_THAT(store.status(), IsOk());
    Stream stream = device->CreateStream().value();
    std::vector<float> values(layout.partition_numel());
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k) * 0.5f + 1.0f;
    ASSERT_THAT((*store)->Write(0, values.data(), values.size(), stream), IsOk());
    HeldBack fence(std::vector<size_t>{1});
    (*store)->set_fence(&fence);
    EXPECT_THAT((*store)->Acquire(1).status(),
                StatusIs(StatusCode::kInternal, HasSubstr("parameter 1 read before its deferred")));
    EXPECT_THAT((*store)->Prefetch(std::vector<size_t>{0, 1, 2}), IsOk());
    ASSERT_THAT(fence.Await(1), IsOk());
    for (size_t i = 0; i < 3; ++i) {
      Result<ShardView> v = (*store)->Acquire(i);
      ASSERT_THAT(v.status(), IsOk()) << "param " << i;
      const ShardSlice& s = layout.slices()[i];
      std::vector<float> got(s.shard_numel);
      if (v->on_host) {
        std::memcpy(got.data(), v->data, got.size() * sizeof(float));
      } else {
        ASSERT_THAT(stream.CopyAsync(got.data(), v->data, got.size() * sizeof(float),
                                     CopyKind::kDeviceToHost),
                    IsOk());
        ASSERT_THAT(stream.Synchronize(), IsOk());
      }
      EXPECT_EQ(std::memcmp(got.data(), values.data() + s.flat_offset, got.size() * sizeof(float)),
                0)
          << "param " << i;
      ASSERT_THAT((*store)->Done(i, stream), IsOk());
    }
    (*store)->set_fence(nullptr);
    store->reset();
    device->DestroyStream(stream).IgnoreError();
  }
}

// Counts the all_gathers issued through it.
class GatherCounter final : public CommunicatorWrapper {
 public:
  explicit GatherCounter(Communicator* target) : CommunicatorWrapper(target) {}
  Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                   DType dtype, Event* done) override {
    ++gathers;
    return CommunicatorWrapper::AllGather(stream, send_shard, recv, numel, dtype, done);
  }
  int64_t gathers = 0;
};

// Note [Persistent re-gathers in the same order on every rank] (engine/zero/hooks/zero3_hooks.cc):
// a step whose updates are deferred issues no all_gather (each persistent parameter is re-gathered
// at its next use, in the forward's order), whichever updates have finished by then: which have
// is this rank's timing, and a collective issued by it would go in a different order on each
// rank. Without deferral the step re-gathers the persistent parameters itself (the count is
// seen), and the next forward's gathers are as many either way.
TEST(DeferredUpdatesCollectivesTest, ADeferredStepIssuesNoAllGather) {
  for (const bool deferred : {false, true}) {
    SCOPED_TRACE(deferred ? "deferred" : "not deferred");
    auto local = testing::MakeLocalComm();
    GatherCounter comm(local.get());
    auto device = testing::MakeHostDevice();
    auto model = testing::MakeTinyModel(device.get(), DType::kBFloat16);
    const std::string zero =
        "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 2000, "
        "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": "
        "\"cpu\", \"pin_memory\": false}, \"offload_param\": {\"device\": \"cpu\", "
        "\"pin_memory\": false}";
    const std::string extra = std::string("\"strata\": {\"overlap_step\": true") +
                              (deferred ? "" : ", \"deferred_updates\": false") +
                              "}, \"bf16\": {\"enabled\": true},";
    Config config = testing::MakeConfig(2, 1, zero, extra, 1, kClipTriggers);
    EngineInit init;
    init.init_param = testing::TestInit(23);
    auto engine = Engine::Initialize(*model, config, comm, *device, init);
    ASSERT_THAT(engine.status(), IsOk());
    Engine& e = **engine;
    const testing::TokenData data = testing::RandomTokens(41, 8, 2, 16, 256);
    int64_t persistent = 0;
    for (const nn::Parameter* p : model->NamedParameters()) persistent += p->numel() <= 200;
    ASSERT_GT(persistent, 0);
    std::vector<int64_t> forward_gathers;
    for (size_t s = 0; s < 3; ++s) {
      const int64_t before_forward = comm.gathers;
      ASSERT_THAT(e.Forward(data.Batch(s)), IsOk());
      forward_gathers.push_back(comm.gathers - before_forward);
      ASSERT_THAT(e.Backward(), IsOk());
      const int64_t before_step = comm.gathers;
      ASSERT_THAT(e.Step(), IsOk());
      EXPECT_EQ(comm.gathers - before_step, deferred ? 0 : persistent) << "step " << s;
    }
    ASSERT_THAT(e.Synchronize(), IsOk());
    // From the second forward on, the deferred run also gathers each persistent parameter once.
    EXPECT_EQ(forward_gathers[2] - forward_gathers[0], deferred ? persistent : 0);
    EXPECT_EQ(forward_gathers[1], forward_gathers[2]);
  }
}

// Note [Copy buffers back while the last gradients land] (engine/overlap/step_overlap_finish.cc):
// with the updated parameters going to the NVMe store through two copy buffers, the step hands the
// buffers on while it waits for the last gradients, so the worker updates each sub-group as its
// gradients land instead of stopping at two and leaving the rest to the next forward. A slow link
// and a large reduce bucket make nearly every sub-group's gradients land after the backward has
// returned, so before, each step deferred all but about two of them; now at most the one whose
// gradients land last. The parameters stay those of the serial step.
TEST(DeferredUpdatesCopyBuffersTest, TheStepUpdatesWhatLandsWhileItWaitsForTheLastGradients) {
  testing::ScratchDir dir;
  auto comm = testing::MakeLocalComm();
  auto run = [&](bool overlap, const std::string& sub, int64_t* deferred, int64_t* sub_groups) {
    DeviceOptions dopt;
    dopt.host.memory_bytes = uint64_t{512} << 20;
    dopt.host.populate_memory = false;
    dopt.host.link_bandwidth_gbps = 0.02;
    auto device = CreateDevice(dopt);
    EXPECT_THAT(device.status(), IsOk());
    if (!device.ok()) return std::vector<std::vector<float>>();
    auto model = testing::MakeTinyModel(device->get(), DType::kFloat32);
    const std::string path = dir.File(sub);
    const std::string zero =
        "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 1000000, "
        "\"stage3_param_persistence_threshold\": 200, \"offload_optimizer\": {\"device\": "
        "\"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
        path +
        "\", \"buffer_count\": 2}, "
        "\"offload_param\": {\"device\": \"nvme\", \"pin_memory\": false, \"nvme_path\": \"" +
        path + "/param\", \"max_in_cpu\": 2000}";
    const std::string extra =
        std::string("\"strata\": {\"overlap_step\": ") + (overlap ? "true" : "false") + "},";
    Config config = testing::MakeConfig(2, 1, zero, extra, 1, 0.0);
    EngineInit init;
    init.init_param = testing::TestInit(23);
    auto engine = Engine::Initialize(*model, config, *comm, **device, init);
    EXPECT_THAT(engine.status(), IsOk());
    if (!engine.ok()) return std::vector<std::vector<float>>();
    Engine& e = **engine;
    const testing::TokenData data = testing::RandomTokens(41, 8, 2, 16, 256);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_THAT(e.Forward(data.Batch(s)), IsOk());
      EXPECT_THAT(e.Backward(), IsOk());
      EXPECT_THAT(e.Step(), IsOk());
    }
    *deferred = e.deferred_sub_groups();
    *sub_groups = static_cast<int64_t>(e.layout().SubGroups(3000).size());
    return testing::TrainAndGather(e, data, 0, 1, nullptr, 0, 1);
  };
  int64_t deferred = 0, sub_groups = 0, serial_deferred = 0, unused = 0;
  const auto overlapped = run(true, "overlap", &deferred, &sub_groups);
  const auto serial = run(false, "serial", &serial_deferred, &unused);
  ASSERT_GE(sub_groups, 8);
  std::printf("%lld sub-group updates deferred in 3 steps of %lld sub-groups\n",
              static_cast<long long>(deferred), static_cast<long long>(sub_groups));
  // Alone, each step leaves at most the sub-group whose gradients land last (0-1 deferred in 3
  // steps here). Beside another test (ctest -j2) the worker finishes fewer updates before the
  // last gradients land: 5 were seen once, after the embedding's gradient went down as its rows
  // (Note [Rows to the region]): 16 KB at most against 128 KB, ~6 ms sooner on this 0.02 GB/s
  // link. Before the copy buffers went back during the wait, each step left all but about two
  // (some 80 here).
  EXPECT_LE(deferred, 3 * 4) << "each step leaves at most a few sub-groups, not all but two";
  EXPECT_EQ(serial_deferred, 0);
  EXPECT_TRUE(testing::SameBits(serial, overlapped)) << "masters differ from the serial step";
}

}  // namespace
}  // namespace strata
