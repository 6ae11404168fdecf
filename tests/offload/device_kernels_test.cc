// Every kernel on every available device against a plain double reference on random data.
//
// Tolerances (u = unit roundoff: fp32 2^-24, fp16 2^-11, bf16 2^-8):
//   cast, fill: exact (round to nearest even; NaN stays NaN, Inf stays Inf);
//   scale: |got - ref| <= (u_dst + 2 u_f32) |ref| + subnormal floor (fp32 product, then rounding);
//   add:   |got - ref| <= (u_dst + 2 u_f32) (|a| + |alpha b|) + floor (CUDA may fuse into FMA);
//   L2 partial sums: relative 1e-5 (fp32 accumulation on the GPU; the host sums in double).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "offload/device/api/kernels.h"
#include "tests/offload/device_fixture.h"
#include "tests/offload/reference.h"
#include "tests/offload/typed_data.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata {
namespace {

using testing::AbsoluteFloor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::RandomTensor;
using testing::RefRoundTo;
using testing::StatusIs;
using testing::UnitRoundoff;
using testing::ValueAt;

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
// Sizes: single element, a partial vector, one vector, a few blocks with a tail.
constexpr size_t kSizes[] = {1, 7, 8, 1000, (size_t{1} << 17) + 13};

class DeviceKernelsTest : public testing::DeviceTest {
 protected:
  void* UploadBytes(const std::vector<uint8_t>& bytes) { return Upload(bytes); }
  std::vector<uint8_t> DownloadBytes(const void* d, size_t n) {
    return Download(static_cast<const uint8_t*>(d), n);
  }
};

void ExpectExact(double want, double got, const std::string& where) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << where;
  } else {
    EXPECT_EQ(want, got) << where;
  }
}

TEST_P(DeviceKernelsTest, CastMatchesReferenceForEveryTypePair) {
  uint64_t seed = testing::TestSeed();
  for (DType s : kTypes) {
    for (DType d : kTypes) {
      for (size_t n : kSizes) {
        auto src = RandomTensor(s, n, ++seed);
        void* dsrc = UploadBytes(src);
        void* ddst = Alloc(n * DTypeBytes(d));
        ASSERT_TRUE(LaunchCast(stream_, ddst, d, dsrc, s, n).ok());
        auto out = DownloadBytes(ddst, n * DTypeBytes(d));
        for (size_t i = 0; i < n; ++i) {
          ExpectExact(RefRoundTo(d, ValueAt(s, src, i)), ValueAt(d, out, i),
                      std::string(DTypeName(s)) + "->" + std::string(DTypeName(d)) +
                          " i=" + std::to_string(i));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_P(DeviceKernelsTest, CastHandlesNanInfOverflowAndSubnormals) {
  const float specials[] = {NAN,
                            -NAN,
                            INFINITY,
                            -INFINITY,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            -1e6f,
                            -0.0f,
                            5.9604645e-8f,
                            2.9802322e-8f,
                            1e-9f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            3.0e-39f,
                            1.0f};
  const size_t n = std::size(specials);
  std::vector<float> host(specials, specials + n);
  float* dsrc = Upload(host);
  for (DType d : {DType::kFloat16, DType::kBFloat16}) {
    void* ddst = Alloc(n * 2);
    ASSERT_TRUE(LaunchCast(stream_, ddst, d, dsrc, DType::kFloat32, n).ok());
    auto out = DownloadBytes(ddst, n * 2);
    for (size_t i = 0; i < n; ++i) {
      const double got = ValueAt(d, out, i);
      ExpectExact(RefRoundTo(d, specials[i]), got,
                  std::string(DTypeName(d)) + " of " + std::to_string(specials[i]));
      if (!std::isnan(specials[i])) {
        EXPECT_EQ(std::signbit(specials[i]), std::signbit(got));
      }
    }
  }
}

TEST_P(DeviceKernelsTest, ScaleMatchesReference) {
  uint64_t seed = testing::TestSeed() + 100;
  for (DType t : kTypes) {
    for (float alpha : {0.5f, -3.7f, 1.0e-3f}) {
      for (size_t n : kSizes) {
        auto src = RandomTensor(t, n, ++seed);
        void* dsrc = UploadBytes(src);
        void* ddst = Alloc(n * DTypeBytes(t));
        ASSERT_TRUE(LaunchScale(stream_, ddst, t, dsrc, alpha, n).ok());
        ASSERT_TRUE(LaunchScale(stream_, dsrc, t, dsrc, alpha, n).ok());  // in place
        auto out = DownloadBytes(ddst, n * DTypeBytes(t));
        auto in_place = DownloadBytes(dsrc, n * DTypeBytes(t));
        EXPECT_EQ(out, in_place);
        for (size_t i = 0; i < n; ++i) {
          const double ref = static_cast<double>(alpha) * ValueAt(t, src, i);
          const double tol =
              (UnitRoundoff(t) + 2 * UnitRoundoff(DType::kFloat32)) * std::fabs(ref) +
              AbsoluteFloor(t);
          ASSERT_NEAR(ref, ValueAt(t, out, i), tol) << DTypeName(t) << " alpha " << alpha;
        }
      }
    }
  }
}

TEST_P(DeviceKernelsTest, AddMatchesReferenceWithMixedTypes) {
  uint64_t seed = testing::TestSeed() + 200;
  for (DType t : kTypes) {
    for (DType bt : kTypes) {
      for (float alpha : {1.0f, -0.25f}) {
        for (size_t n : {size_t{7}, size_t{1000}, (size_t{1} << 17) + 13}) {
          auto a = RandomTensor(t, n, ++seed);
          auto b = RandomTensor(bt, n, ++seed);
          void* da = UploadBytes(a);
          void* db = UploadBytes(b);
          void* ddst = Alloc(n * DTypeBytes(t));
          ASSERT_TRUE(LaunchAdd(stream_, ddst, t, da, db, bt, alpha, n).ok());
          ASSERT_TRUE(LaunchAdd(stream_, da, t, da, db, bt, alpha, n).ok());  // accumulate
          auto out = DownloadBytes(ddst, n * DTypeBytes(t));
          EXPECT_EQ(out, DownloadBytes(da, n * DTypeBytes(t)));
          for (size_t i = 0; i < n; ++i) {
            const double av = ValueAt(t, a, i), bv = alpha * ValueAt(bt, b, i);
            const double tol = (UnitRoundoff(t) + 2 * UnitRoundoff(DType::kFloat32)) *
                                   (std::fabs(av) + std::fabs(bv)) +
                               AbsoluteFloor(t);
            ASSERT_NEAR(av + bv, ValueAt(t, out, i), tol)
                << DTypeName(t) << " += " << DTypeName(bt) << " i=" << i;
          }
        }
      }
    }
  }
}

TEST_P(DeviceKernelsTest, FillWritesTheRoundedValue) {
  for (DType t : kTypes) {
    for (float v : {0.0f, 1.1f, -65504.0f, 1.0e6f, NAN}) {
      for (size_t n : kSizes) {
        void* d = Alloc(n * DTypeBytes(t));
        ASSERT_TRUE(LaunchFill(stream_, d, t, v, n).ok());
        auto out = DownloadBytes(d, n * DTypeBytes(t));
        for (size_t i = 0; i < n; ++i) {
          ExpectExact(RefRoundTo(t, v), ValueAt(t, out, i), std::string(DTypeName(t)));
        }
        if (HasFailure()) return;
      }
    }
  }
}

TEST_P(DeviceKernelsTest, CheckFiniteFlagsOnlyInfOrNanAndNeverClears) {
  uint64_t seed = testing::TestSeed() + 300;
  std::mt19937_64 rng(seed);
  for (DType t : kTypes) {
    for (size_t n : kSizes) {
      auto clean = RandomTensor(t, n, ++seed);
      void* dclean = UploadBytes(clean);
      uint32_t* flag = static_cast<uint32_t*>(Alloc(sizeof(uint32_t)));
      const uint32_t zero = 0;
      ASSERT_TRUE(stream_.CopyAsync(flag, &zero, 4, CopyKind::kHostToDevice).ok());
      ASSERT_TRUE(LaunchCheckFinite(stream_, flag, dclean, t, n).ok());
      EXPECT_EQ(0u, Download(flag, 1)[0]) << DTypeName(t) << " n=" << n;
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        auto dirty = clean;
        testing::SetValue(t, dirty, rng() % n, bad);
        void* ddirty = UploadBytes(dirty);
        ASSERT_TRUE(stream_.CopyAsync(flag, &zero, 4, CopyKind::kHostToDevice).ok());
        ASSERT_TRUE(LaunchCheckFinite(stream_, flag, ddirty, t, n).ok());
        ASSERT_TRUE(LaunchCheckFinite(stream_, flag, dclean, t, n).ok());  // must not clear
        EXPECT_EQ(1u, Download(flag, 1)[0]) << DTypeName(t) << " n=" << n << " bad=" << bad;
      }
    }
  }
}

TEST_P(DeviceKernelsTest, L2NormPartialsMatchReference) {
  uint64_t seed = testing::TestSeed() + 400;
  for (DType t : kTypes) {
    for (size_t n : kSizes) {
      for (size_t parts : {size_t{1}, size_t{3}, size_t{64}, n + 5}) {
        auto src = RandomTensor(t, n, ++seed);
        void* dsrc = UploadBytes(src);
        float* dparts = static_cast<float*>(Alloc(parts * sizeof(float)));
        ASSERT_TRUE(LaunchL2NormPartials(stream_, dparts, parts, dsrc, t, n).ok());
        auto got = Download(dparts, parts);
        const size_t chunk = L2ChunkNumel(n, parts);
        for (size_t p = 0; p < parts; ++p) {
          double ref = 0;
          for (size_t i = p * chunk; i < std::min(n, (p + 1) * chunk); ++i) {
            ref += ValueAt(t, src, i) * ValueAt(t, src, i);
          }
          ASSERT_NEAR(ref, got[p], 1e-5 * ref) << DTypeName(t) << " n=" << n << " p=" << p;
        }
      }
    }
  }
}

TEST_P(DeviceKernelsTest, RejectsBadArgumentsAtLaunch) {
  void* d = Alloc(64);
  EXPECT_THAT(LaunchFill(stream_, nullptr, DType::kFloat32, 0, 4),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("fill: dst is null")));
  EXPECT_THAT(LaunchFill(stream_, static_cast<char*>(d) + 1, DType::kFloat32, 0, 4),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("fill: dst is not aligned to 4 bytes (fp32)")));
  EXPECT_THAT(
      LaunchL2NormPartials(stream_, static_cast<float*>(d), 0, d, DType::kFloat32, 4),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("l2norm_partials: num_partials is 0")));
  EXPECT_THAT(LaunchCheckFinite(stream_, nullptr, d, DType::kFloat32, 4),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("check_finite: flag is null")));
  EXPECT_THAT(LaunchAdd(stream_, d, DType::kFloat32, d, nullptr, DType::kBFloat16, 1, 4),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("add: b is null")));
  EXPECT_THAT(LaunchFill(Stream(), d, DType::kFloat32, 0, 4),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("fill: empty stream handle")));
  EXPECT_THAT(LaunchFill(stream_, nullptr, DType::kFloat32, 0, 0), IsOk());  // numel 0: no-op
  if (device_->kind() == DeviceKind::kHost) {
    std::vector<float> host(4);  // host memory is not device memory
    EXPECT_THAT(LaunchFill(stream_, host.data(), DType::kFloat32, 0, 4),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("fill: dst"), HasSubstr("is not device memory"))));
  }
  EXPECT_THAT(stream_.Synchronize(), IsOk());
}

// One argument order for every launch: the stream, the output first (as in CopyAsync), then the
// inputs, scalars and numel (kernels.h). Checked on the types, so a reorder is a test failure.
TEST(DeviceKernelSignaturesTest, PutTheOutputFirstEverywhere) {
  EXPECT_TRUE((std::is_same_v<decltype(&LaunchCast), Status (*)(const Stream&, void*, DType,
                                                                const void*, DType, size_t)>));
  EXPECT_TRUE((std::is_same_v<decltype(&LaunchScale), Status (*)(const Stream&, void*, DType,
                                                                 const void*, float, size_t)>));
  EXPECT_TRUE(
      (std::is_same_v<decltype(&LaunchAdd), Status (*)(const Stream&, void*, DType, const void*,
                                                       const void*, DType, float, size_t)>));
  EXPECT_TRUE((std::is_same_v<decltype(&LaunchFill),
                              Status (*)(const Stream&, void*, DType, float, size_t)>));
  EXPECT_TRUE((std::is_same_v<decltype(&LaunchCheckFinite),
                              Status (*)(const Stream&, uint32_t*, const void*, DType, size_t)>));
  EXPECT_TRUE(
      (std::is_same_v<decltype(&LaunchL2NormPartials),
                      Status (*)(const Stream&, float*, size_t, const void*, DType, size_t)>));
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DeviceKernelsTest,
                         ::testing::ValuesIn(testing::AllDeviceParams()), testing::DeviceParamName);

}  // namespace
}  // namespace strata
