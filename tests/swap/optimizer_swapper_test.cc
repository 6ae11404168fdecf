// N Adam steps with fp32 master/m/v on NVMe must equal, bit for bit, the same steps in memory.
#include "swap/optimizer_swapper.h"

#include "core/half.h"

#include <cstring>
#include <filesystem>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/aio/faulty_engine.h"
#include "tests/support/aio_or_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::strata::testing::TestSeed;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Mode {
  IoEngineKind engine;
  bool pipeline_read, pipeline_write;
  size_t buffers;
  DType grad_dtype;
  bool swap_grads = false;
};

void PrintTo(const Mode& m, std::ostream* os) { *os << IoEngineKindName(m.engine); }

std::string ModeName(const ::testing::TestParamInfo<Mode>& i) {
  const Mode& m = i.param;
  return std::string(IoEngineKindName(m.engine)) + (m.pipeline_read ? "_pread" : "") +
         (m.pipeline_write ? "_pwrite" : "") + "_b" + std::to_string(m.buffers) +
         (m.grad_dtype == DType::kBFloat16 ? "_bf16grads" : "_fp32grads") +
         (m.swap_grads ? "_on_nvme" : "");
}

std::vector<float> RandomFloats(size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

class OptimizerSwapperTest : public ::testing::TestWithParam<Mode> {};

TEST_P(OptimizerSwapperTest, StepsOnNvmeEqualInMemoryStepsBitwise) {
  const Mode mode = GetParam();
  STRATA_AIO_OR_SKIP(mode.engine);
  ScratchDir dir;
  std::filesystem::create_directories(dir.path() / "x");
  std::filesystem::create_directories(dir.path() / "y");
  AioOptions ao;
  ao.engine = mode.engine;
  ao.block_size = 512 << 10;
  auto aio = std::move(AioHandle::Create(ao)).value();
  auto opt = std::move(CpuOptimizer::Create(OptimizerKind::kAdam)).value();
  Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
  hp.lr = 1e-2f;
  hp.weight_decay = 0.01f;
  ASSERT_TRUE(opt.AddGroup(hp).ok());
  Hyperparams hp2 = hp;
  hp2.adam_w_mode = false;
  hp2.lr = 3e-3f;
  ASSERT_TRUE(opt.AddGroup(hp2).ok());

  OptimizerSwapperOptions so;
  so.nvme_paths = {(dir.path() / "x").string(), (dir.path() / "y").string()};
  so.pipeline_read = mode.pipeline_read;
  so.pipeline_write = mode.pipeline_write;
  so.buffer_count = mode.buffers;
  so.pin_memory = false;
  EXPECT_TRUE(so.checksums) << "checksums are on by default";
  so.swap_grads = mode.swap_grads;
  auto sw = OptimizerSwapper::Create(so, aio.get(), &opt);
  ASSERT_TRUE(sw.ok()) << sw.status().ToString();

  std::mt19937_64 rng(TestSeed());
  const std::vector<size_t> sizes = {1, 1000, 300'001, 777'777, 65'536, 1'200'000, 17};
  struct Ref {
    std::vector<float> p, m, v;
  };
  std::vector<Ref> ref;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int g = static_cast<int>(i % 2);
    ASSERT_TRUE((*sw)->AddSubGroup(sizes[i], g).ok());
    Ref r{RandomFloats(sizes[i], rng, 1.0f), std::vector<float>(sizes[i], 0.0f),
          std::vector<float>(sizes[i], 0.0f)};
    ASSERT_TRUE((*sw)->Initialize(static_cast<int>(i), r.p.data()).ok());
    ref.push_back(std::move(r));
  }
  constexpr int kSteps = 3;
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<float>> grads;
    std::vector<std::vector<uint16_t>> grads16;
    std::vector<std::vector<uint16_t>> copy_nvme(sizes.size()), copy_mem(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(RandomFloats(sizes[i], rng, 0.1f));
      grads16.push_back(ToBf16(grads.back()));
      copy_nvme[i].assign(sizes[i], 0);
      copy_mem[i].assign(sizes[i], 1);
    }
    const bool bf16 = mode.grad_dtype == DType::kBFloat16;
    if (mode.swap_grads) {
      std::vector<SwapFuture> fs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        fs.push_back((*sw)->WriteGrads(static_cast<int>(i), grads[i].data()));
      }
      for (auto& f : fs) ASSERT_TRUE(f.Wait().ok());
    }
    Status s = (*sw)->Step([&](int i) {
      SubGroupIo io;
      io.grads = mode.swap_grads ? nullptr
                 : bf16          ? static_cast<const void*>(grads16[i].data())
                                 : grads[i].data();
      io.grad_dtype = mode.grad_dtype;
      io.param_copy = copy_nvme[i].data();
      io.param_copy_dtype = DType::kBFloat16;
      return io;
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < sizes.size(); ++i) {
      StepTensors t;
      t.numel = sizes[i];
      t.params = ref[i].p.data();
      t.exp_avg = ref[i].m.data();
      t.exp_avg_sq = ref[i].v.data();
      t.grads = bf16 ? static_cast<const void*>(grads16[i].data()) : grads[i].data();
      t.grad_dtype = mode.grad_dtype;
      t.param_copy = copy_mem[i].data();
      t.param_copy_dtype = DType::kBFloat16;
      ASSERT_TRUE(opt.StepAt(*opt.hyperparams(static_cast<int>(i % 2)), step, t).ok());
      ASSERT_EQ(copy_nvme[i], copy_mem[i])
          << "bf16 copy-out of sub-group " << i << " step " << step;
    }
  }
  EXPECT_EQ((*sw)->step_count(), kSteps);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> p(sizes[i]), m(sizes[i]), v(sizes[i]);
    ASSERT_TRUE((*sw)->ReadState(static_cast<int>(i), p.data(), m.data(), v.data()).ok());
    ASSERT_EQ(0, std::memcmp(p.data(), ref[i].p.data(), p.size() * 4)) << "params " << i;
    ASSERT_EQ(0, std::memcmp(m.data(), ref[i].m.data(), m.size() * 4)) << "exp_avg " << i;
    ASSERT_EQ(0, std::memcmp(v.data(), ref[i].v.data(), v.size() * 4)) << "exp_avg_sq " << i;
  }
  const auto& st = (*sw)->last_step();
  EXPECT_GT(st.bytes_read, 0u);
  uint64_t grad_bytes = 0;
  for (size_t n : sizes) grad_bytes += mode.swap_grads ? n * sizeof(float) : 0;
  EXPECT_EQ(st.bytes_read, st.bytes_written + grad_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, OptimizerSwapperTest,
    ::testing::Values(Mode{IoEngineKind::kIoUring, false, false, 1, DType::kFloat32},
                      Mode{IoEngineKind::kIoUring, true, true, 4, DType::kBFloat16},
                      Mode{IoEngineKind::kIoUring, true, false, 3, DType::kFloat32},
                      Mode{IoEngineKind::kLibaio, false, true, 2, DType::kBFloat16},
                      Mode{IoEngineKind::kLibaio, true, true, 5, DType::kFloat32},
                      Mode{IoEngineKind::kIoUring, true, true, 3, DType::kFloat32, true}),
    ModeName);

TEST(OptimizerSwapperErrorTest, ReadErrorStopsTheStepNamingTheSubGroup) {
  STRATA_AIO_OR_SKIP(IoEngineKind::kIoUring);
  ScratchDir dir;
  AioOptions ao;
  testing::FaultPlan plan;
  plan.eio_every = 4;
  plan.only_reads = true;
  ao.engine_factory = [plan](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kIoUring, eo));
    return std::unique_ptr<IoEngine>(new testing::FaultyEngine(std::move(real), plan));
  };
  auto aio = std::move(AioHandle::Create(ao)).value();
  auto opt = std::move(CpuOptimizer::Create(OptimizerKind::kAdam)).value();
  ASSERT_TRUE(opt.AddGroup(DefaultHyperparams(OptimizerKind::kAdam)).ok());
  OptimizerSwapperOptions so;
  so.nvme_paths = {dir.path().string()};
  so.pipeline_read = so.pipeline_write = true;
  so.pin_memory = false;
  auto sw = std::move(OptimizerSwapper::Create(so, aio.get(), &opt)).value();
  std::vector<float> p(1 << 18, 0.5f), g(1 << 18, 0.01f);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(sw->AddSubGroup(p.size(), 0).ok());
    ASSERT_TRUE(sw->Initialize(i, p.data()).ok());  // writes are not faulted
  }
  Status s = sw->Step([&](int) {
    SubGroupIo io;
    io.grads = g.data();
    return io;
  });
  EXPECT_THAT(s, StatusIs(StatusCode::kIoError,
                          AllOf(HasSubstr("read sub-group"), HasSubstr("Input/output error"))));
  EXPECT_EQ(s.sys_errno(), EIO);
  EXPECT_EQ(sw->step_count(), 0);
}

// A write that fails mid-step leaves that sub-group torn: reading it back is FailedPrecondition
// naming the failed write (not stale or half-new numbers), the sub-groups not reached keep their
// old state, and Initialize makes the torn one usable again.
TEST(OptimizerSwapperErrorTest, FailedWriteInAStepLeavesThatSubGroupTornNotStale) {
  ScratchDir dir;
  AioOptions ao;
  testing::FaultPlan plan;
  plan.enospc_every = 1;
  plan.only_writes = true;
  plan.armed = std::make_shared<std::atomic<bool>>(false);
  ao.engine_factory = [plan](int, const IoEngineOptions& eo) -> Result<std::unique_ptr<IoEngine>> {
    STRATA_ASSIGN_OR_RETURN(auto real, CreateIoEngine(IoEngineKind::kAuto, eo));
    return std::unique_ptr<IoEngine>(new testing::FaultyEngine(std::move(real), plan));
  };
  auto aio = std::move(AioHandle::Create(ao)).value();
  auto opt = std::move(CpuOptimizer::Create(OptimizerKind::kAdam)).value();
  ASSERT_TRUE(opt.AddGroup(DefaultHyperparams(OptimizerKind::kAdam)).ok());
  OptimizerSwapperOptions so;
  so.nvme_paths = {dir.path().string()};
  so.pin_memory = false;
  auto sw = std::move(OptimizerSwapper::Create(so, aio.get(), &opt)).value();
  std::vector<float> p(1 << 16, 0.5f), g(1 << 16, 0.01f);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sw->AddSubGroup(p.size(), 0).ok());
    ASSERT_TRUE(sw->Initialize(i, p.data()).ok());
  }
  plan.armed->store(true);
  Status s = sw->Step([&](int) {
    SubGroupIo io;
    io.grads = g.data();
    return io;
  });
  plan.armed->store(false);
  EXPECT_THAT(
      s, StatusIs(StatusCode::kIoError, AllOf(HasSubstr("write sub-group 0"), HasSubstr("torn"),
                                              HasSubstr("No space left on device"))));
  EXPECT_EQ(sw->step_count(), 0);
  std::vector<float> back(p.size());
  EXPECT_THAT(sw->ReadState(0, back.data(), nullptr, nullptr),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("read sub-group 0"), HasSubstr("write failed"),
                             HasSubstr("No space left on device"))));
  ASSERT_TRUE(sw->ReadState(1, back.data(), nullptr, nullptr).ok());
  EXPECT_EQ(back, p) << "sub-group 1 was not reached: it keeps its old state";
  ASSERT_TRUE(sw->Initialize(0, p.data()).ok());
  ASSERT_TRUE(sw->ReadState(0, back.data(), nullptr, nullptr).ok());
  EXPECT_EQ(back, p);
}

}  // namespace
}  // namespace strata
