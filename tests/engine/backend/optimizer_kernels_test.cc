// The device optimizer kernels (offload/device/optim/optimizer_kernels.h) on every device kind
// against cpu_adam: each step against the double-precision ReferenceStep with cpu_adam's own
// conformance bound (16 float roundings of the magnitudes entering each result; the fused copy bit
// for bit), and on the host backends bit for bit against CpuOptimizer::StepAt. The squared-norm
// partials must equal the host loop's bits on every device (Note [Squared-norm order]).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "cpu_adam/cpu_optimizer.h"
#include "offload/device/optim/norm_chunks_avx2.h"
#include "offload/device/optim/optimizer_kernels.h"
#include "tests/cpu_adam/optimizer_problem.h"
#include "tests/engine/backend/backend_devices.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using ::strata::testing::BackendKind;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

// A device buffer freed with its device.
struct DeviceBuffer {
  Device* device = nullptr;
  void* ptr = nullptr;
  DeviceBuffer(Device* d, size_t bytes) : device(d) {
    Result<void*> r = d->Allocate(std::max<size_t>(bytes, 256));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    ptr = r.ok() ? *r : nullptr;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) device->Free(ptr).IgnoreError();
  }
  float* f() const { return static_cast<float*>(ptr); }
};

class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Device>> d = testing::MakeBackendDevice(GetParam());
    if (!d.ok() && d.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << d.status().message();
    }
    ASSERT_THAT(d.status(), IsOk());
    device_ = std::move(d).value();
    Result<Stream> s = device_->CreateStream();
    ASSERT_THAT(s.status(), IsOk());
    stream_ = *s;
  }
  void TearDown() override {
    if (device_ != nullptr) {
      EXPECT_THAT(device_->DestroyStream(stream_), IsOk());
    }
  }
  bool host_backend() const { return GetParam() != BackendKind::kCuda; }

  Status Upload(void* dst, const void* src, size_t bytes) {
    STRATA_RETURN_IF_ERROR(stream_.CopyAsync(dst, src, bytes, CopyKind::kHostToDevice));
    return stream_.Synchronize();
  }
  Status Download(void* dst, const void* src, size_t bytes) {
    STRATA_RETURN_IF_ERROR(stream_.CopyAsync(dst, src, bytes, CopyKind::kDeviceToHost));
    return stream_.Synchronize();
  }

  std::unique_ptr<Device> device_;
  Stream stream_;
};

std::string BackendParamName(const ::testing::TestParamInfo<BackendKind>& info) {
  return testing::BackendName(info.param);
}

// --- The step ----------------------------------------------------------------------------------

struct StepCase {
  OptimizerKind kind;
  bool adam_w_mode;
  const char* copy;  // "none", "fp32", "bf16", "fp16"
};

class OptimizerStepTest : public ::testing::TestWithParam<std::tuple<BackendKind, StepCase>> {};

std::string StepName(const ::testing::TestParamInfo<std::tuple<BackendKind, StepCase>>& info) {
  const auto& [backend, c] = info.param;
  std::string k = std::string(OptimizerKindName(c.kind));
  if (c.kind == OptimizerKind::kAdam) k = c.adam_w_mode ? "adamw" : "adam_l2";
  return std::string(testing::BackendName(backend)) + "_" + k + "_copy_" + c.copy;
}

DType CopyDType(const char* copy) {
  const std::string c = copy;
  return c == "fp16" ? DType::kFloat16 : c == "bf16" ? DType::kBFloat16 : DType::kFloat32;
}

TEST_P(OptimizerStepTest, MatchesCpuAdamReferenceOverSteps) {
  const auto& [backend, c] = GetParam();
  Result<std::unique_ptr<Device>> made = testing::MakeBackendDevice(backend);
  if (!made.ok() && made.status().code() == StatusCode::kUnavailable) {
    GTEST_SKIP() << made.status().message();
  }
  ASSERT_THAT(made.status(), IsOk());
  std::unique_ptr<Device> device = std::move(made).value();
  Result<Stream> st = device->CreateStream();
  ASSERT_THAT(st.status(), IsOk());
  const Stream stream = *st;
  auto sync_copy = [&](void* dst, const void* src, size_t bytes, CopyKind k) {
    ASSERT_THAT(stream.CopyAsync(dst, src, bytes, k), IsOk());
    ASSERT_THAT(stream.Synchronize(), IsOk());
  };

  const std::string copy = c.copy;
  const bool copy16 = copy == "bf16" || copy == "fp16";
  const DType copy_dtype = CopyDType(c.copy);
  constexpr size_t kNumel = 10007;  // not a multiple of any vector width or block
  constexpr float kGradScale = 0.5f;
  testing::OptimizerProblem cur(c.kind, kNumel, DType::kFloat32, copy16, copy_dtype, kGradScale,
                                11);
  testing::OptimizerProblem cpu = cur;  // stepped by CpuOptimizer on the host
  Hyperparams hp = DefaultHyperparams(c.kind);
  hp.weight_decay = 0.01f;
  hp.adam_w_mode = c.adam_w_mode;

  const size_t fbytes = kNumel * sizeof(float);
  DeviceBuffer p(device.get(), fbytes), g(device.get(), fbytes), m(device.get(), fbytes),
      v(device.get(), fbytes), out(device.get(), kNumel * DTypeBytes(copy_dtype));
  sync_copy(p.ptr, cur.params.data(), fbytes, CopyKind::kHostToDevice);
  sync_copy(m.ptr, cur.exp_avg.data(), fbytes, CopyKind::kHostToDevice);
  sync_copy(v.ptr, cur.exp_avg_sq.data(), fbytes, CopyKind::kHostToDevice);

  Result<CpuOptimizer> opt = CpuOptimizer::Create(c.kind);
  ASSERT_THAT(opt.status(), IsOk());
  std::vector<float> fp32_copy(kNumel);
  for (int64_t step = 1; step <= 3; ++step) {
    cur.NewGrads(100 + static_cast<uint64_t>(step));
    cpu.grads_f32 = cur.grads_f32;
    const testing::DoubleState before(cur);
    sync_copy(g.ptr, cur.grads_f32.data(), fbytes, CopyKind::kHostToDevice);

    OptimizerStepLaunch l;
    l.kind = c.kind;
    l.hp = hp;
    l.step = step;
    l.grad_scale = kGradScale;
    l.numel = kNumel;
    l.params = p.f();
    l.grads = g.f();
    l.exp_avg = m.f();
    l.exp_avg_sq = v.f();
    if (copy != "none") {
      l.param_copy = out.ptr;
      l.param_copy_dtype = copy_dtype;
    }
    ASSERT_THAT(LaunchOptimizerStep(stream, l), IsOk());
    ASSERT_THAT(stream.Synchronize(), IsOk());
    sync_copy(cur.params.data(), p.ptr, fbytes, CopyKind::kDeviceToHost);
    sync_copy(cur.exp_avg.data(), m.ptr, fbytes, CopyKind::kDeviceToHost);
    sync_copy(cur.exp_avg_sq.data(), v.ptr, fbytes, CopyKind::kDeviceToHost);
    if (copy16) {
      sync_copy(cur.copy.data(), out.ptr, kNumel * 2, CopyKind::kDeviceToHost);
    } else if (copy == "fp32") {
      sync_copy(fp32_copy.data(), out.ptr, fbytes, CopyKind::kDeviceToHost);
      EXPECT_EQ(std::memcmp(fp32_copy.data(), cur.params.data(), fbytes), 0)
          << "fp32 copy-out differs from the updated params at step " << step;
    }
    EXPECT_EQ(testing::CompareStep(before, cur.GradsAsDouble(), hp, step, cur), "")
        << "step " << step;

    StepOptions so;
    so.grad_scale = kGradScale;
    ASSERT_THAT(opt->StepAt(hp, step, cpu.Tensors(), so), IsOk());
    if (backend != BackendKind::kCuda) {  // the host backend is cpu_adam itself: same bits
      EXPECT_EQ(std::memcmp(cur.params.data(), cpu.params.data(), fbytes), 0) << "step " << step;
      if (c.kind != OptimizerKind::kAdagrad) {
        EXPECT_EQ(std::memcmp(cur.exp_avg.data(), cpu.exp_avg.data(), fbytes), 0);
      }
      if (c.kind != OptimizerKind::kLion) {
        EXPECT_EQ(std::memcmp(cur.exp_avg_sq.data(), cpu.exp_avg_sq.data(), fbytes), 0);
      }
      if (copy16) {
        EXPECT_EQ(cur.copy, cpu.copy);
      }
    }
  }
  EXPECT_THAT(device->DestroyStream(stream), IsOk());
}

std::vector<std::tuple<BackendKind, StepCase>> StepCases() {
  std::vector<std::tuple<BackendKind, StepCase>> out;
  const StepCase cases[] = {
      {OptimizerKind::kAdam, true, "none"},     {OptimizerKind::kAdam, true, "bf16"},
      {OptimizerKind::kAdam, true, "fp16"},     {OptimizerKind::kAdam, true, "fp32"},
      {OptimizerKind::kAdam, false, "bf16"},    {OptimizerKind::kAdagrad, false, "none"},
      {OptimizerKind::kAdagrad, false, "bf16"}, {OptimizerKind::kLion, true, "none"},
      {OptimizerKind::kLion, true, "fp16"},
  };
  for (BackendKind b : testing::AllBackends()) {
    for (const StepCase& c : cases) out.emplace_back(b, c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerStepTest, ::testing::ValuesIn(StepCases()), StepName);

// --- The squared norm and argument checks ------------------------------------------------------

using OptimizerKernelsTest = BackendTest;

TEST_P(OptimizerKernelsTest, SquaredNormPartialsHaveTheHostLoopsBits) {
  const size_t n = 3 * kSquaredNormChunk + 123;
  std::vector<float> x(n);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (float& e : x) e = d(rng);
  const size_t chunks = SquaredNormChunks(n);
  ASSERT_EQ(chunks, 4u);
  DeviceBuffer src(device_.get(), n * sizeof(float)), partials(device_.get(), chunks * 8);
  ASSERT_THAT(Upload(src.ptr, x.data(), n * sizeof(float)), IsOk());
  ASSERT_THAT(LaunchSquaredNormPartials(stream_, static_cast<double*>(partials.ptr), src.f(), n),
              IsOk());
  std::vector<double> got(chunks);
  ASSERT_THAT(Download(got.data(), partials.ptr, chunks * 8), IsOk());
  double plain = 0;  // independent reference: one long double-precision sum
  for (float e : x) plain += double(e) * double(e);
  double total = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t len = std::min(kSquaredNormChunk, n - c * kSquaredNormChunk);
    const double want = SquaredNormChunk(x.data() + c * kSquaredNormChunk, len);
    EXPECT_EQ(std::memcmp(&got[c], &want, sizeof(double)), 0)
        << "chunk " << c << ": " << got[c] << " vs " << want;
    total += got[c];
  }
  EXPECT_NEAR(total, plain, 1e-12 * plain);
}

// Many chunks (the host sums eight chunks side by side: AVX2 or portable body), a short last
// one, Inf and NaN: each chunk's sum has the bits of a plain left-to-right double loop over it.
TEST_P(OptimizerKernelsTest, ManyChunksHaveThePlainLoopsBitsOnHostAndBackend) {
  for (const size_t n : {size_t{37} * kSquaredNormChunk + 555, size_t{16} * kSquaredNormChunk,
                         size_t{7} * kSquaredNormChunk + 1, size_t{100}}) {
    std::vector<float> x(n);
    std::mt19937_64 rng(testing::TestSeed() + n);
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (float& e : x) e = d(rng);
    if (n > 9 * kSquaredNormChunk) {
      x[9 * kSquaredNormChunk + 17] = std::numeric_limits<float>::infinity();
      x[3 * kSquaredNormChunk] = std::numeric_limits<float>::quiet_NaN();
      x[5 * kSquaredNormChunk + 4] = 3e38f;  // finite: its square is finite in double
    }
    const size_t chunks = SquaredNormChunks(n);
    std::vector<double> want(chunks, 0.0);
    for (size_t i = 0; i < n; ++i) {
      want[i / kSquaredNormChunk] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    }
    std::vector<double> host(chunks, -1.0), scalar(chunks, -1.0), avx2(chunks, -1.0);
    SquaredNormChunkSums(x.data(), n, host.data());
    // Both bodies it dispatches between (norm_chunks_avx2.h), whatever this CPU picks.
    internal::SquaredNormChunkSumsScalar(x.data(), n, scalar.data());
    __builtin_cpu_init();
    const bool has_avx2 = __builtin_cpu_supports("avx2") != 0;
    size_t avx2_done = 0;
    if (has_avx2) {
      avx2_done = internal::SquaredNormChunkSumsAvx2(x.data(), n / kSquaredNormChunk, avx2.data());
      EXPECT_EQ(avx2_done, n / kSquaredNormChunk / 8 * 8) << n;
    }
    DeviceBuffer src(device_.get(), n * sizeof(float)), partials(device_.get(), chunks * 8);
    ASSERT_THAT(Upload(src.ptr, x.data(), n * sizeof(float)), IsOk());
    ASSERT_THAT(LaunchSquaredNormPartials(stream_, static_cast<double*>(partials.ptr), src.f(), n),
                IsOk());
    std::vector<double> got(chunks);
    ASSERT_THAT(Download(got.data(), partials.ptr, chunks * 8), IsOk());
    for (size_t c = 0; c < chunks; ++c) {
      EXPECT_EQ(std::memcmp(&host[c], &want[c], sizeof(double)), 0)
          << "n " << n << " chunk " << c << ": " << host[c] << " vs " << want[c];
      EXPECT_EQ(std::memcmp(&got[c], &want[c], sizeof(double)), 0)
          << "n " << n << " chunk " << c << ": " << got[c] << " vs " << want[c];
      EXPECT_EQ(std::memcmp(&scalar[c], &want[c], sizeof(double)), 0)
          << "n " << n << " chunk " << c << " (portable body)";
      if (c < avx2_done) {
        EXPECT_EQ(std::memcmp(&avx2[c], &want[c], sizeof(double)), 0)
            << "n " << n << " chunk " << c << " (AVX2 body)";
      }
    }
  }
}

TEST_P(OptimizerKernelsTest, RefusesBadArgumentsNamingThem) {
  DeviceBuffer a(device_.get(), 4096), b(device_.get(), 4096), m(device_.get(), 4096),
      v(device_.get(), 4096);
  OptimizerStepLaunch l;
  l.numel = 100;
  l.params = a.f();
  l.grads = b.f();
  l.exp_avg = m.f();
  l.exp_avg_sq = v.f();
  EXPECT_THAT(LaunchOptimizerStep(stream_, l), IsOk());
  OptimizerStepLaunch bad = l;
  bad.params = nullptr;
  EXPECT_THAT(LaunchOptimizerStep(stream_, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("params is null")));
  bad = l;
  bad.step = 0;
  EXPECT_THAT(LaunchOptimizerStep(stream_, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("step 0")));
  bad = l;
  bad.exp_avg = a.f() + 50;
  EXPECT_THAT(LaunchOptimizerStep(stream_, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("overlap")));
  bad = l;
  bad.grad_scale = 0.0f;
  EXPECT_THAT(LaunchOptimizerStep(stream_, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("grad_scale")));
  bad = l;
  bad.hp.beta1 = 1.5f;
  EXPECT_THAT(LaunchOptimizerStep(stream_, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("beta1")));
  EXPECT_THAT(LaunchOptimizerStep(Stream(), l),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("empty stream")));
  EXPECT_THAT(stream_.Synchronize(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Backends, OptimizerKernelsTest,
                         ::testing::ValuesIn(testing::AllBackends()), BackendParamName);

}  // namespace
}  // namespace strata
