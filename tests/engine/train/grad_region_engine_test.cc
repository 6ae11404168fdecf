// The engine with its gradients on NVMe (offload_optimizer nvme, strata.nvme_grad_chunk: the
// gradient region of engine/nvme/grad_region.h) against the same run with the gradient partition
// in pinned CPU memory (nvme_grad_chunk 0): bit-identical parameters, losses, loss scales and
// skipped steps at stage 3, fp32 / bf16 / fp16 with injected overflows, clipping on and off,
// gradient accumulation 2, the overlapped step on and off. Chunks of 4096 elements and two chunk
// buffers make the tiny model's partition cycle through the region (writes and read-add-write
// reads every micro-batch). Faults on the region (EIO, ENOSPC) fail the step naming the region's
// file and offset, and the checkpoint saved before resumes bitwise; a block corrupted on disk is
// DataLoss by its checksum.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/engine/train/engine_fixture.h"
#include "tests/support/inf_injector.h"
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

constexpr char kGradSwap[] = "strata-grad-rank0.swap";
constexpr int64_t kGas = 2;

struct GradCase {
  DType dtype = DType::kFloat32;
  double clip = 0.0;
  bool overlap = false;  // strata.overlap_step
};

std::string CaseName(const ::testing::TestParamInfo<GradCase>& info) {
  const GradCase& c = info.param;
  return std::string(DTypeName(c.dtype)) + (c.clip > 0 ? "_clip" : "_noclip") +
         (c.overlap ? "_overlap" : "_serial");
}

std::string DtypeKeys(DType d) {
  if (d == DType::kBFloat16) return "\"bf16\": {\"enabled\": true},";
  // A small window: the scale grows back between the injected overflows.
  if (d == DType::kFloat16) {
    return "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 10, \"loss_scale_window\": 2,"
           " \"hysteresis\": 1},";
  }
  return "";
}

struct EngineRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<llama::LlamaForCausalLM> model;
  std::unique_ptr<Engine> engine;
};

// Stage 3, the optimizer on NVMe under `dir`, sub-groups of 3000 elements (not chunk-aligned);
// the gradients in a region of `chunk_bytes` chunks (0: in pinned CPU memory).
Result<EngineRun> MakeRun(Communicator& comm, const GradCase& c, const std::string& dir,
                          uint64_t chunk_bytes, uint64_t seed, const FaultPlan* plan = nullptr) {
  EngineRun r;
  r.device = testing::MakeHostDevice();
  r.model = testing::MakeTinyModel(r.device.get(), c.dtype);
  const std::string zero =
      "\"stage\": 3, \"sub_group_size\": 3000, \"reduce_bucket_size\": 40000,"
      " \"stage3_param_persistence_threshold\": 200,"
      " \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": false},"
      " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
      dir + "\", \"pin_memory\": false, \"buffer_count\": 2}";
  const std::string strata = "\"strata\": {\"nvme_grad_chunk\": " + std::to_string(chunk_bytes) +
                             ", \"overlap_step\": " + (c.overlap ? "true" : "false") + "},";
  Config config = testing::MakeConfig(2, kGas, zero, DtypeKeys(c.dtype) + strata, 1, c.clip);
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

struct Trace {
  std::vector<float> losses;
  std::vector<double> scales;
  int64_t skipped = 0;
  std::vector<std::vector<float>> masters;
};

// `steps` steps of kGas micro-batches; fp16 injects an Inf into lm_head's gradient in the
// micro-batches `inf_at` lists (indices over all micro-batches).
Trace Train(EngineRun& r, const testing::TokenData& data, int steps,
            const std::vector<int>& inf_at) {
  Trace t;
  testing::InfInjector inject(&r.model->lm_head().weight());
  r.model->lm_head().AddHooks(&inject);
  int micro = 0;
  for (int s = 0; s < steps; ++s) {
    for (int64_t m = 0; m < kGas; ++m, ++micro) {
      inject.armed = std::find(inf_at.begin(), inf_at.end(), micro) != inf_at.end();
      EXPECT_THAT(r.engine->Forward(data.Batch(static_cast<size_t>(micro))), IsOk());
      t.losses.push_back(r.engine->Loss().value());
      EXPECT_THAT(r.engine->Backward(), IsOk());
      EXPECT_THAT(r.engine->Step(), IsOk());
    }
    t.scales.push_back(r.engine->stats().loss_scale);
  }
  r.model->lm_head().RemoveHooksRecursive(&inject);
  t.skipped = r.engine->stats().skipped_steps;
  for (size_t i = 0; i < r.engine->layout().slices().size(); ++i) {
    std::vector<float> v(r.engine->layout().slices()[i].numel);
    EXPECT_THAT(r.engine->GatherMasterParameter(i, v), IsOk());
    t.masters.push_back(std::move(v));
  }
  return t;
}

class EngineGradRegionTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(EngineGradRegionTest, GradientsThroughNvmeEqualTheInMemoryPlacementBitwise) {
  const GradCase c = GetParam();
  auto comm = testing::MakeLocalComm();
  constexpr int kSteps = 4;
  const testing::TokenData data = testing::RandomTokens(17, kSteps * kGas, 2, 16, 256);
  // fp16: an overflow in the last micro-batch of step 0 and in the first of step 2 (its sum
  // reaches the step through the region's read-add-write).
  const std::vector<int> inf_at =
      c.dtype == DType::kFloat16 ? std::vector<int>{1, 4} : std::vector<int>{};
  Trace mem, nvme;
  {
    ScratchDir dir;
    Result<EngineRun> r = MakeRun(*comm, c, dir.path().string(), 0, 7);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_FALSE(std::filesystem::exists(dir.File(kGradSwap)));
    mem = Train(*r, data, kSteps, inf_at);
  }
  ScratchDir dir;
  Result<EngineRun> r = MakeRun(*comm, c, dir.path().string(), 16 << 10, 7);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_TRUE(std::filesystem::exists(dir.File(kGradSwap))) << "no gradient region";
  nvme = Train(*r, data, kSteps, inf_at);
  EXPECT_TRUE(SameBits(mem.masters, nvme.masters));
  EXPECT_EQ(mem.losses, nvme.losses);
  EXPECT_EQ(mem.scales, nvme.scales);
  EXPECT_EQ(mem.skipped, nvme.skipped);
  if (c.dtype == DType::kFloat16) {
    EXPECT_EQ(nvme.skipped, 2);
  }
  EXPECT_EQ(nvme.masters.size(), mem.masters.size());
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;

INSTANTIATE_TEST_SUITE_P(Placements, EngineGradRegionTest,
                         ::testing::Values(GradCase{kF32, 0.0, false}, GradCase{kF32, 0.05, true},
                                           GradCase{kBf16, 0.05, false}, GradCase{kBf16, 0.0, true},
                                           GradCase{kF16, 0.05, false}, GradCase{kF16, 0.0, true}),
                         CaseName);

// Faults on the gradient region during a step's backward: the step fails naming the region's
// file and offset, and the checkpoint saved before loads into a fresh engine that continues
// bitwise as a run that never failed.
enum class Fault { kWriteEio, kWriteEnospc, kReadEio, kCorruptedBlock };

class EngineGradRegionFaultTest : public ::testing::TestWithParam<Fault> {};

TEST_P(EngineGradRegionFaultTest, FailsTheStepNamingFileAndOffsetAndTheCheckpointResumes) {
  const Fault fault = GetParam();
  const GradCase c{kBf16, 0.05, false};
  auto comm = testing::MakeLocalComm();
  constexpr int kBefore = 2, kAfter = 2;
  const testing::TokenData data = testing::RandomTokens(29, (kBefore + kAfter) * kGas, 2, 16, 256);
  ScratchDir dir;
  const std::string ckpt = dir.File("ckpt");
  FaultPlan plan;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  if (fault == Fault::kWriteEio || fault == Fault::kWriteEnospc) {
    (fault == Fault::kWriteEio ? plan.eio_every : plan.enospc_every) = 1;
    plan.only_writes = true;
  } else if (fault == Fault::kReadEio) {
    plan.eio_every = 1;
    plan.only_reads = true;
  }
  Status failed;
  off_t corrupted_chunk = -1;  // kCorruptedBlock: the chunk whose byte is flipped
  {
    Result<EngineRun> a = MakeRun(*comm, c, dir.File("opt"), 16 << 10, 7, &plan);
    ASSERT_THAT(a.status(), IsOk());
    Engine& e = *a->engine;
    size_t micro = 0;
    for (int s = 0; s < kBefore; ++s) {
      for (int64_t m = 0; m < kGas; ++m, ++micro) {
        ASSERT_THAT(e.Forward(data.Batch(micro)), IsOk());
        ASSERT_THAT(e.Backward(), IsOk());
        ASSERT_THAT(e.Step(), IsOk());
      }
    }
    ASSERT_THAT(e.SaveCheckpoint(ckpt, "good"), IsOk());
    // The first micro-batch writes chunks out; the second reads them back (read-add-write).
    ASSERT_THAT(e.Forward(data.Batch(micro)), IsOk());
    if (fault == Fault::kWriteEio || fault == Fault::kWriteEnospc) plan.armed->store(true);
    failed = e.Backward();
    if (failed.ok()) failed = e.Step();  // the first micro-batch's Step is a no-op
    if (failed.ok()) failed = e.Forward(data.Batch(micro + 1));
    if (failed.ok()) failed = e.Loss().status();  // synchronizes: the first pass's adds are done
    if (failed.ok() && fault == Fault::kCorruptedBlock) {
      // A chunk in the middle of the region is on disk: the backward fills the region from its
      // end down, the chunks above the one added into are written behind it (Note [Write-behind])
      // and only the last few (the buffers') stay in memory; the second pass reads it back.
      const std::string region = dir.File("opt/" + std::string(kGradSwap));
      const off_t chunk = 16 << 10;
      const off_t chunks =
          static_cast<off_t>(e.layout().partition_numel() * sizeof(float) + chunk - 1) / chunk;
      EXPECT_GE(chunks, 12) << "too few chunks for one in the middle to be on disk";
      corrupted_chunk = chunks / 2;  // the region's extents are in chunk order
      const off_t at = corrupted_chunk * chunk + 100;
      const int fd = ::open(region.c_str(), O_RDWR);
      EXPECT_GE(fd, 0);
      uint8_t b = 0;
      EXPECT_EQ(::pread(fd, &b, 1, at), 1);
      b ^= 0x5A;
      EXPECT_EQ(::pwrite(fd, &b, 1, at), 1);
      ::close(fd);
    }
    if (fault == Fault::kReadEio) plan.armed->store(true);
    if (failed.ok()) failed = e.Backward();
    if (failed.ok()) failed = e.Step();
    if (failed.ok()) failed = e.Synchronize();  // deferred updates read the region after Step
    plan.armed->store(false);
  }
  const std::string file = std::string(kGradSwap) + " @ ";
  switch (fault) {
    case Fault::kWriteEio:
    case Fault::kReadEio:
      EXPECT_THAT(failed, StatusIs(StatusCode::kIoError,
                                   AllOf(HasSubstr("gradient region chunk"), HasSubstr(file),
                                         HasSubstr("Input/output error"))));
      break;
    case Fault::kWriteEnospc:
      EXPECT_THAT(failed, StatusIs(StatusCode::kIoError,
                                   AllOf(HasSubstr("gradient region chunk"), HasSubstr(file),
                                         HasSubstr("No space left on device"))));
      break;
    case Fault::kCorruptedBlock:
      EXPECT_THAT(failed, StatusIs(StatusCode::kDataLoss,
                                   AllOf(HasSubstr("checksum mismatch"), HasSubstr(file),
                                         HasSubstr("gradient region chunk " +
                                                   std::to_string(corrupted_chunk) + " "))));
      break;
  }
  // The checkpoint resumes bitwise against an uninterrupted run.
  Trace clean, resumed;
  {
    ScratchDir udir;
    Result<EngineRun> u = MakeRun(*comm, c, udir.File("opt"), 16 << 10, 7);
    ASSERT_THAT(u.status(), IsOk());
    clean = Train(*u, data, kBefore + kAfter, {});
  }
  Result<EngineRun> r = MakeRun(*comm, c, dir.File("opt"), 16 << 10, 1007);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_THAT(r->engine->LoadCheckpoint(ckpt).status(), IsOk());
  EXPECT_EQ(r->engine->stats().global_steps, kBefore);
  const std::vector<std::vector<float>> masters = testing::TrainAndGather(
      *r->engine, data, kAfter, kGas, &resumed.losses, static_cast<size_t>(kBefore * kGas));
  EXPECT_TRUE(SameBits(clean.masters, masters)) << "the resumed run departs from the clean one";
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kAfter * kGas));
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(clean.losses[kBefore * kGas + i], resumed.losses[i]) << "micro-batch " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, EngineGradRegionFaultTest,
                         ::testing::Values(Fault::kWriteEio, Fault::kWriteEnospc, Fault::kReadEio,
                                           Fault::kCorruptedBlock),
                         [](const auto& info) {
                           switch (info.param) {
                             case Fault::kWriteEio:
                               return std::string("write_eio");
                             case Fault::kWriteEnospc:
                               return std::string("write_enospc");
                             case Fault::kReadEio:
                               return std::string("read_eio");
                             case Fault::kCorruptedBlock:
                               return std::string("corrupted_block");
                           }
                           return std::string("unknown");
                         });

}  // namespace
}  // namespace strata
