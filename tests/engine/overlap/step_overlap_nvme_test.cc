// strata.overlap_step with the optimizer on NVMe: the read-ahead from the boundary micro-batch's
// Forward, writes left in flight past the step (deferred) and drained by a checkpoint, and a
// deferred write's error failing the call that drains it, Engine::Synchronize
// (engine/overlap/step_overlap.h, engine/nvme/optimizer_nvme.h).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::ScratchDir;
using testing::StatusIs;

constexpr uint64_t kSeed = 41;

// Counts the reads submitted while `counting` is set, and holds each write back `write_delay`
// before submitting it (so the step's writes are still in flight when it returns).
struct IoProbe {
  std::atomic<bool> counting{false};
  std::atomic<int> reads{0};
  std::chrono::milliseconds write_delay{0};
};

class ProbeEngine final : public IoEngineWrapper {
 public:
  ProbeEngine(std::unique_ptr<IoEngine> target, IoProbe* probe)
      : IoEngineWrapper(std::move(target)), probe_(probe) {}
  Result<int> Submit(std::span<const IoRequest> requests) override {
    for (const IoRequest& r : requests) {
      if (r.op == IoOp::kRead && probe_->counting.load()) probe_->reads.fetch_add(1);
      if (r.op == IoOp::kWrite && probe_->write_delay.count() > 0) {
        std::this_thread::sleep_for(probe_->write_delay);
      }
    }
    return target().Submit(requests);
  }

 private:
  IoProbe* probe_;
};

struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

// Stage 2, the optimizer on NVMe (several sub-groups, two swap buffers), overlap_step on, no
// clipping (the overlapped step is exact, not speculative). `probe` or `plan` wraps the aio.
Result<EngineRun> MakeRun(Communicator& comm, const std::string& dir, uint64_t seed, int64_t gas,
                          IoProbe* probe = nullptr, const testing::FaultPlan* plan = nullptr,
                          bool overlap = true, int buffer_count = 2) {
  EngineRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), DType::kFloat32);
  const std::string zero =
      "\"stage\": 2, \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
      " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
      dir + "/opt\", \"pin_memory\": false, \"buffer_count\": " + std::to_string(buffer_count) +
      "}";
  const std::string extra =
      std::string("\"strata\": {\"overlap_step\": ") + (overlap ? "true" : "false") + "},";
  Config config = testing::MakeConfig(2, gas, zero, extra, 1, /*clip=*/0);
  if (probe != nullptr) {
    config.aio.engine_factory =
        [probe](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
      return std::unique_ptr<IoEngine>(new ProbeEngine(std::move(real), probe));
    };
  } else if (plan != nullptr) {
    config.aio.engine_factory =
        [plan = *plan](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
      return std::unique_ptr<IoEngine>(new testing::FaultyEngine(std::move(real), plan));
    };
  }
  EngineInit init;
  init.init_param = testing::TestInit(seed);
  STRATA_ASSIGN_OR_RETURN(r.engine, Engine::Initialize(*r.model, config, comm, *r.device, init));
  return r;
}

Status TrainStep(Engine& e, const testing::TokenData& data, size_t first, int64_t gas) {
  for (int64_t m = 0; m < gas; ++m) {
    STRATA_RETURN_IF_ERROR(e.Forward(data.Batch(first + static_cast<size_t>(m))));
    STRATA_RETURN_IF_ERROR(e.Backward());
  }
  return e.Step();
}

TEST(StepOverlapNvmeTest, ReadAheadStartsAtTheBoundaryForwardAndTheStepsStayExact) {
  auto comm = testing::MakeLocalComm();
  constexpr int64_t kGas = 2;
  constexpr int kSteps = 3;
  const testing::TokenData data = testing::RandomTokens(5, kSteps * kGas, 2, 16, 256);
  ScratchDir dir, serial_dir;
  IoProbe probe;
  Result<EngineRun> r = MakeRun(*comm, dir.path().string(), kSeed, kGas, &probe);
  ASSERT_THAT(r.status(), IsOk());
  Engine& e = *r->engine;
  std::vector<float> losses;
  std::vector<float> drained;
  for (int s = 0; s < kSteps; ++s) {
    if (s > 0) {
      // Which states the last step left in the buffers depends on the order the worker took its
      // sub-groups in (Note [Ready and resident first] in step_overlap_worker.cc): with those the
      // next backward wants first left there, nothing needs reading before it (1 run in ~10 with
      // the cores shared). A read of a master drains the buffers, so every step starts from NVMe.
      drained.resize(e.layout().slices()[0].numel);
      ASSERT_THAT(e.GatherMasterParameter(0, drained), IsOk());
    }
    // The first micro-batch's Forward and Backward read nothing of the optimizer state.
    ASSERT_THAT(e.Forward(data.Batch(s * kGas)), IsOk());
    ASSERT_THAT(e.Backward(), IsOk());
    // The boundary micro-batch's Forward starts the read-ahead: reads are submitted before its
    // Backward is called (a liveness check with a generous deadline, not a timing threshold).
    probe.reads.store(0);
    probe.counting.store(true);
    ASSERT_THAT(e.Forward(data.Batch(s * kGas + 1)), IsOk());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (probe.reads.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    probe.counting.store(false);
    EXPECT_GT(probe.reads.load(), 0) << "step " << s << ": no optimizer state read before Backward";
    ASSERT_THAT(e.Backward(), IsOk());
    ASSERT_THAT(e.Step(), IsOk());
    Result<float> loss = e.Loss();
    ASSERT_THAT(loss.status(), IsOk());
    losses.push_back(*loss);
  }
  std::vector<std::vector<float>> masters;
  for (size_t i = 0; i < e.layout().slices().size(); ++i) {
    masters.emplace_back(e.layout().slices()[i].numel);
    ASSERT_THAT(e.GatherMasterParameter(i, masters.back()), IsOk());
  }
  // The same run with overlap_step off: the same bits.
  Result<EngineRun> u =
      MakeRun(*comm, serial_dir.path().string(), kSeed, kGas, nullptr, nullptr, false);
  ASSERT_THAT(u.status(), IsOk());
  std::vector<float> serial_losses;
  const auto serial = testing::TrainAndGather(*u->engine, data, kSteps, kGas, &serial_losses);
  EXPECT_TRUE(testing::SameBits(serial, masters));
  ASSERT_EQ(serial_losses.size(), static_cast<size_t>(kSteps * kGas));
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(serial_losses[s * kGas + 1], losses[s]) << s;
}

TEST(StepOverlapNvmeTest, DeferredWritesAreDrainedByACheckpointThatResumesBitwise) {
  auto comm = testing::MakeLocalComm();
  constexpr int kBefore = 2, kAfter = 2;
  const testing::TokenData data = testing::RandomTokens(7, kBefore + kAfter, 2, 16, 256);
  ScratchDir dir, clean_dir, resume_dir;
  const std::string ckpt = dir.File("ckpt");
  IoProbe probe;
  probe.write_delay = std::chrono::milliseconds(5);  // the last writes outlive the step
  {
    Result<EngineRun> r = MakeRun(*comm, dir.path().string(), kSeed, 1, &probe);
    ASSERT_THAT(r.status(), IsOk());
    for (int s = 0; s < kBefore; ++s) ASSERT_THAT(TrainStep(*r->engine, data, s, 1), IsOk());
    ASSERT_THAT(r->engine->SaveCheckpoint(ckpt, "t"), IsOk());  // right after the step
  }
  std::vector<float> clean_losses, resumed_losses;
  Result<EngineRun> c = MakeRun(*comm, clean_dir.path().string(), kSeed, 1);
  ASSERT_THAT(c.status(), IsOk());
  const auto clean = testing::TrainAndGather(*c->engine, data, kBefore + kAfter, 1, &clean_losses);
  Result<EngineRun> r = MakeRun(*comm, resume_dir.path().string(), kSeed + 1000, 1);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_THAT(r->engine->LoadCheckpoint(ckpt).status(), IsOk());
  const auto resumed =
      testing::TrainAndGather(*r->engine, data, kAfter, 1, &resumed_losses, kBefore);
  EXPECT_TRUE(testing::SameBits(clean, resumed));
  ASSERT_EQ(resumed_losses.size(), static_cast<size_t>(kAfter));
  for (int s = 0; s < kAfter; ++s) EXPECT_EQ(clean_losses[kBefore + s], resumed_losses[s]) << s;
}

TEST(StepOverlapNvmeTest, SynchronizeSettlesTheWritesAndKeepsTheBuffersTheNextStepReadsFrom) {
  auto comm = testing::MakeLocalComm();
  constexpr int kSteps = 3;
  const testing::TokenData data = testing::RandomTokens(11, kSteps, 2, 16, 256);
  ScratchDir dir, plain_dir;
  IoProbe probe;
  probe.write_delay = std::chrono::milliseconds(5);  // the last writes outlive the step
  // Buffers for every sub-group's state: the step after the first reads nothing.
  Result<EngineRun> r = MakeRun(*comm, dir.path().string(), kSeed, 1, &probe, nullptr, true, 64);
  ASSERT_THAT(r.status(), IsOk());
  std::vector<int> reads;
  for (int s = 0; s < kSteps; ++s) {
    probe.reads.store(0);
    probe.counting.store(true);
    ASSERT_THAT(TrainStep(*r->engine, data, s, 1), IsOk());
    ASSERT_THAT(r->engine->Synchronize(), IsOk());
    probe.counting.store(false);
    reads.push_back(probe.reads.load());
  }
  // The first step reads every state; the later ones take them from the buffers (a drain that
  // dropped them would read every state again).
  EXPECT_GT(reads[0], 0);
  for (int s = 1; s < kSteps; ++s) EXPECT_EQ(reads[s], 0) << "step " << s;
  std::vector<std::vector<float>> masters;
  for (size_t i = 0; i < r->engine->layout().slices().size(); ++i) {
    masters.emplace_back(r->engine->layout().slices()[i].numel);
    ASSERT_THAT(r->engine->GatherMasterParameter(i, masters.back()), IsOk());
  }
  Result<EngineRun> p = MakeRun(*comm, plain_dir.path().string(), kSeed, 1);
  ASSERT_THAT(p.status(), IsOk());
  const auto plain = testing::TrainAndGather(*p->engine, data, kSteps, 1);
  EXPECT_TRUE(testing::SameBits(plain, masters));
}

// The second step's writes fail (ENOSPC) and some are still in flight when it returns: the step
// fails when it reuses a failed write's buffer, else `drain` (the next call that waits for them)
// does, naming the sub-group, the file and the offset.
void ExpectADeferredWriteErrorSurfaces(uint64_t data_seed,
                                       const std::function<Status(Engine&, ScratchDir&)>& drain) {
  auto comm = testing::MakeLocalComm();
  const testing::TokenData data = testing::RandomTokens(data_seed, 2, 2, 16, 256);
  ScratchDir dir;
  testing::FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  plan.enospc_every = 1;
  plan.only_writes = true;
  Result<EngineRun> r = MakeRun(*comm, dir.path().string(), kSeed, 1, nullptr, &plan);
  ASSERT_THAT(r.status(), IsOk());
  Engine& e = *r->engine;
  ASSERT_THAT(TrainStep(e, data, 0, 1), IsOk());
  ASSERT_THAT(e.Forward(data.Batch(1)), IsOk());
  ASSERT_THAT(e.Backward(), IsOk());
  plan.armed->store(true);
  Status step = e.Step();
  plan.armed->store(false);
  EXPECT_THAT(
      step.ok() ? drain(e, dir) : step,
      StatusIs(StatusCode::kIoError, AllOf(HasSubstr("write sub-group"), HasSubstr(".swap @ "),
                                           HasSubstr("No space left on device"))));
}

TEST(StepOverlapNvmeTest, SynchronizeReportsADeferredWriteError) {
  ExpectADeferredWriteErrorSurfaces(13, [](Engine& e, ScratchDir&) { return e.Synchronize(); });
}

TEST(StepOverlapNvmeTest, ADeferredWriteErrorFailsTheCallThatDrainsItNamingFileAndOffset) {
  ExpectADeferredWriteErrorSurfaces(
      9, [](Engine& e, ScratchDir& dir) { return e.SaveCheckpoint(dir.File("ckpt"), "t"); });
}

}  // namespace
}  // namespace strata
