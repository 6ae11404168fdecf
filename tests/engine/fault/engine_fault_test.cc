// Faults on the NVMe swap path during an engine step, with checkpoint recovery: an injected EIO
// (read), ENOSPC (write) and a short read that cannot complete (the swap file truncated on disk)
// each fail Engine::Step with a Status naming the swap file and the offset; a byte flipped in the
// optimizer's swap file between steps is DataLoss by its checksum, naming the file. After each,
// the checkpoint saved before the fault loads into a fresh engine, which continues bitwise equal
// to a run that never failed. Injected short reads that can complete are resumed and change
// nothing. (tests/engine/nvme has the same faults on NvmeOptimizerState alone, without an
// engine or checkpoints.)
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::FaultPlan;
using ::strata::testing::FaultyEngine;
using ::strata::testing::IsOk;
using ::strata::testing::SameBits;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kOptimizerSwap[] = "strata-optimizer-rank0.swap";
constexpr int kGas = 1;
constexpr int kBefore = 2;  // steps before the checkpoint (and the fault)
constexpr int kAfter = 2;   // steps the resumed run continues for
constexpr uint64_t kSeed = 23;

struct Placement {
  const char* name;
  int stage;
  DType dtype;
  bool pipeline;
  const char* param;  // offload_param.device at stage 3
};

std::string PlacementName(const ::testing::TestParamInfo<Placement>& info) {
  return info.param.name;
}

// zero_optimization with the optimizer on NVMe under `dir` (several sub-groups).
std::string ZeroKeys(const Placement& p, const std::string& dir) {
  const std::string pipe = p.pipeline ? "true" : "false";
  std::string z = "\"stage\": " + std::to_string(p.stage) +
                  ", \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
                  " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
                  dir +
                  "/opt\", \"pin_memory\": false, \"buffer_count\": 2, \"pipeline_read\": " + pipe +
                  ", \"pipeline_write\": " + pipe + "}";
  if (p.stage == 3) {
    z += ", \"stage3_param_persistence_threshold\": 200, \"offload_param\": {\"device\": \"" +
         std::string(p.param) + "\", \"pin_memory\": false";
    if (std::string(p.param) == "nvme") z += ", \"nvme_path\": \"" + dir + "/param\"";
    z += "}";
  }
  return z;
}

struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

// An engine whose aio threads go through a FaultyEngine following `plan` (when given).
Result<EngineRun> MakeRun(Communicator& comm, const Placement& p, const std::string& dir,
                          uint64_t seed, const FaultPlan* plan = nullptr) {
  EngineRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), p.dtype);
  Config config =
      testing::MakeConfig(2, kGas, ZeroKeys(p, dir),
                          p.dtype == DType::kBFloat16 ? "\"bf16\": {\"enabled\": true}," : "");
  if (plan != nullptr) {
    config.aio.engine_factory =
        [plan = *plan](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
      STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
      return std::unique_ptr<IoEngine>(new FaultyEngine(std::move(real), plan));
    };
  }
  EngineInit init;
  init.init_param = testing::TestInit(seed);
  STRATA_ASSIGN_OR_RETURN(r.engine, Engine::Initialize(*r.model, config, comm, *r.device, init));
  return r;
}

// One micro-batch and the step (kGas = 1).
Status TrainStep(Engine& e, const testing::TokenData& data, size_t batch) {
  STRATA_RETURN_IF_ERROR(e.Forward(data.Batch(batch)));
  STRATA_RETURN_IF_ERROR(e.Backward());
  return e.Step();
}

enum class Fault { kReadEio, kWriteEnospc, kTruncatedFile, kCorruptedBlock };

class EngineFaultTest : public ::testing::TestWithParam<Placement> {
 protected:
  void SetUp() override {
    comm_ = testing::MakeLocalComm();
    data_ = testing::RandomTokens(31, (kBefore + kAfter + 1) * kGas, 2, 16, 256);
    if (std::string(GetParam().param) == "nvme") {
      ScratchDir probe;
      Result<EngineRun> r = MakeRun(*comm_, GetParam(), probe.path().string(), kSeed);
      if (r.status().code() == StatusCode::kUnimplemented) {
        GTEST_SKIP() << "offload_param.device = nvme is not built in this tree: "
                     << r.status().ToString();
      }
    }
  }

  // Trains kBefore steps, saves the checkpoint "good", injects `fault` into the next step and
  // returns that step's Status; then checks the checkpoint resumes bitwise.
  Status FailAStepThenResume(Fault fault) {
    const Placement& p = GetParam();
    ScratchDir dir;
    const std::string ckpt = dir.File("ckpt");
    FaultPlan plan;
    plan.armed = std::make_shared<std::atomic<bool>>(false);
    if (fault == Fault::kReadEio) {
      plan.eio_every = 1;
      plan.only_reads = true;
    } else if (fault == Fault::kWriteEnospc) {
      plan.enospc_every = 1;
      plan.only_writes = true;
    }
    Status failed;
    {
      Result<EngineRun> a = MakeRun(*comm_, p, dir.path().string(), kSeed, &plan);
      EXPECT_THAT(a.status(), IsOk());
      if (!a.ok()) return a.status();
      Engine& e = *a->engine;
      for (int s = 0; s < kBefore; ++s) EXPECT_THAT(TrainStep(e, data_, s), IsOk());
      EXPECT_THAT(e.SaveCheckpoint(ckpt, "good"), IsOk());
      const std::string swap = dir.File("opt/") + kOptimizerSwap;
      // Before the step's first state read: the read-ahead may read sub-group 0 as early as the
      // Backward (it was deferred last step: Note [Deferred reads in order] in
      // engine/overlap/step_overlap_defer.cc), and its checksums are verified by its update.
      if (fault == Fault::kCorruptedBlock) FlipByte(swap, 8192);
      EXPECT_THAT(e.Forward(data_.Batch(kBefore)), IsOk());
      EXPECT_THAT(e.Backward(), IsOk());
      if (fault == Fault::kTruncatedFile) {
        EXPECT_EQ(::truncate(swap.c_str(), 4096), 0) << swap << ": " << std::strerror(errno);
      }
      plan.armed->store(true);
      failed = e.Step();
      // strata.deferred_updates (stage 3, shards on cpu or nvme): the step's updates run after
      // Step returns, during the next forward, and their errors fail the call that waits for
      // them; Synchronize waits for all.
      if (failed.ok()) failed = e.Synchronize();
      plan.armed->store(false);
      // The failed engine is destroyed here: no hang, its swap files go.
    }
    ExpectResumesBitwise(dir, ckpt);
    return failed;
  }

  static void FlipByte(const std::string& path, off_t offset) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
    b ^= 0x5A;
    ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }

  // A fresh engine (other initial values, the same nvme_path) loads the checkpoint `latest`
  // names and trains kAfter steps: parameters and losses equal a run that never failed.
  void ExpectResumesBitwise(const ScratchDir& dir, const std::string& ckpt) {
    const Placement& p = GetParam();
    std::vector<float> losses_u, losses_r;
    std::vector<std::vector<float>> masters_u, masters_r;
    {
      ScratchDir udir;
      Result<EngineRun> u = MakeRun(*comm_, p, udir.path().string(), kSeed);
      ASSERT_THAT(u.status(), IsOk());
      masters_u = testing::TrainAndGather(*u->engine, data_, kBefore + kAfter, kGas, &losses_u);
    }
    Result<EngineRun> r = MakeRun(*comm_, p, dir.path().string(), kSeed + 1000);
    ASSERT_THAT(r.status(), IsOk());
    Result<std::string> loaded = r->engine->LoadCheckpoint(ckpt);
    ASSERT_THAT(loaded.status(), IsOk());
    EXPECT_EQ(r->engine->stats().global_steps, kBefore);
    masters_r = testing::TrainAndGather(*r->engine, data_, kAfter, kGas, &losses_r, kBefore * kGas);
    EXPECT_TRUE(SameBits(masters_u, masters_r)) << "the resumed run departs from the clean one";
    ASSERT_EQ(losses_r.size(), static_cast<size_t>(kAfter * kGas));
    for (size_t i = 0; i < losses_r.size(); ++i) {
      EXPECT_EQ(losses_u[kBefore * kGas + i], losses_r[i]) << "micro-batch " << kBefore + i;
    }
  }

  std::unique_ptr<Communicator> comm_;
  testing::TokenData data_;
};

TEST_P(EngineFaultTest, ReadErrorFailsTheStepNamingFileAndOffsetAndTheCheckpointResumes) {
  const Status s = FailAStepThenResume(Fault::kReadEio);
  EXPECT_THAT(s, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr("read sub-group"), HasSubstr(kOptimizerSwap),
                                HasSubstr(" @ "), HasSubstr("Input/output error"))));
  EXPECT_EQ(s.sys_errno(), EIO);
}

TEST_P(EngineFaultTest, FullDiskFailsTheStepNamingFileAndOffsetAndTheCheckpointResumes) {
  const Status s = FailAStepThenResume(Fault::kWriteEnospc);
  // With the parameters on NVMe too, the first write of the step may be a parameter shard's.
  EXPECT_THAT(s, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr(".swap @ "), HasSubstr("No space left on device"))));
  if (std::string(GetParam().param) != "nvme") {
    EXPECT_THAT(s.message(), HasSubstr(kOptimizerSwap));
  }
  EXPECT_EQ(s.sys_errno(), ENOSPC);
}

TEST_P(EngineFaultTest, ShortReadOfATruncatedSwapFileFailsTheStepAndTheCheckpointResumes) {
  const Status s = FailAStepThenResume(Fault::kTruncatedFile);
  // The state read ahead from the Forward is updated and written back (left in flight) before
  // the first read past the new end; a write that lands first extends the file again: the read
  // then finds a hole, which its checksum catches, or the end that write left (a short read at
  // that offset, not at 4096: which writes land first depends on the order of the reads, Note
  // [Deferred reads in order] in engine/overlap/step_overlap_defer.cc).
  EXPECT_THAT(
      s, StatusIs(StatusCode::kDataLoss,
                  AllOf(HasSubstr("read sub-group"), HasSubstr(kOptimizerSwap), HasSubstr(" @ "),
                        ::testing::AnyOf(HasSubstr("the file ends at offset"),
                                         HasSubstr("checksum mismatch")))));
}

TEST_P(EngineFaultTest, CorruptedSwapBlockIsDataLossNamingTheFileAndTheCheckpointResumes) {
  const Status s = FailAStepThenResume(Fault::kCorruptedBlock);
  EXPECT_THAT(s, StatusIs(StatusCode::kDataLoss,
                          AllOf(HasSubstr("checksum mismatch"), HasSubstr(kOptimizerSwap),
                                HasSubstr(" @ "), HasSubstr("sub-group 0"))));
}

TEST_P(EngineFaultTest, ShortReadsThatCompleteAreResumedAndChangeNothing) {
  const Placement& p = GetParam();
  FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(true);
  plan.short_every = 1;
  plan.only_reads = true;
  ScratchDir clean_dir, faulty_dir;
  Result<EngineRun> clean = MakeRun(*comm_, p, clean_dir.path().string(), kSeed);
  Result<EngineRun> faulty = MakeRun(*comm_, p, faulty_dir.path().string(), kSeed, &plan);
  ASSERT_THAT(clean.status(), IsOk());
  ASSERT_THAT(faulty.status(), IsOk());
  std::vector<float> la, lb;
  const auto a = testing::TrainAndGather(*clean->engine, data_, kBefore + 1, kGas, &la);
  const auto b = testing::TrainAndGather(*faulty->engine, data_, kBefore + 1, kGas, &lb);
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_EQ(la, lb);
}

INSTANTIATE_TEST_SUITE_P(
    Placements, EngineFaultTest,
    ::testing::Values(Placement{"stage2_fp32_pipelined", 2, DType::kFloat32, true, "none"},
                      Placement{"stage3_bf16_param_cpu", 3, DType::kBFloat16, false, "cpu"},
                      Placement{"stage3_fp32_param_nvme", 3, DType::kFloat32, true, "nvme"}),
    PlacementName);

}  // namespace
}  // namespace strata
