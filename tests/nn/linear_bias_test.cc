// nn::Linear with a bias: y = x W^T + b, dx = dy W, dW = dy^T x, db = sum over tokens of dy,
// each against a double-precision loop; the bias is a parameter named "<module>.bias" after the
// weight; fp32 and bf16 weights/gradients (bf16 within a stated rounding tolerance); a fresh slot
// is written, a second backward adds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn/modules/layers/linear.h"
#include "nn/tensor/parameter_storage.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using ::strata::testing::ExpectNear;
using ::strata::testing::IsOk;
using ::strata::testing::RandomVector;

class LinearBiasTest : public ::strata::testing::NnTest,
                       public ::testing::WithParamInterface<DType> {};

TEST_P(LinearBiasTest, ForwardAndBackwardMatchADoubleLoop) {
  const DType dtype = GetParam();
  const int64_t n = 37, in = 24, out = 20;
  Linear lin("proj", in, out, dtype, /*bias=*/true);
  lin.AssignNames("model.layers.0.self_attn.q_proj");  // a root takes the prefix as its name
  ASSERT_NE(lin.bias(), nullptr);
  const std::vector<Parameter*> params = lin.NamedParameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name(), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(params[1]->name(), "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(params[1]->shape(), Shape{out});
  // Gradients in the parameters' dtype (fresh slots from the storage).
  auto storage = ParameterStorage::Create(device_.get(), params, true, dtype, stream_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  ASSERT_THAT((*storage)->ZeroGrads(stream_), IsOk());

  // Values representable in bf16, so the reference sees exactly what the module stores.
  auto round = [&](std::vector<float> v) {
    if (dtype == DType::kFloat32) return v;
    for (float& f : v) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u &= 0xFFFF0000u;
      std::memcpy(&f, &u, 4);
    }
    return v;
  };
  const auto w = round(RandomVector(static_cast<size_t>(out * in), 1, 0.3f));
  const auto b = round(RandomVector(static_cast<size_t>(out), 2));
  const auto x = RandomVector(static_cast<size_t>(n * in), 3);
  const auto dy = RandomVector(static_cast<size_t>(n * out), 4);
  ASSERT_THAT(UploadParameter(stream_, *params[0], w.data(), DType::kFloat32, w.size()), IsOk());
  ASSERT_THAT(UploadParameter(stream_, *params[1], b.data(), DType::kFloat32, b.size()), IsOk());
  float* d_x = Up(x);
  float* d_y = Up(std::vector<float>(static_cast<size_t>(n * out)));
  float* d_dy = Up(dy);
  float* d_dx = Up(std::vector<float>(static_cast<size_t>(n * in)));
  ASSERT_THAT(lin.Forward(Ctx(), Tensor(d_x, DType::kFloat32, {n, in}),
                          Tensor(d_y, DType::kFloat32, {n, out})),
              IsOk());
  const std::vector<float> y = Down(d_y, static_cast<size_t>(n * out));
  std::vector<double> want_y(static_cast<size_t>(n * out)), want_dx(static_cast<size_t>(n * in));
  std::vector<double> want_dw(static_cast<size_t>(out * in)), want_db(static_cast<size_t>(out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t k = 0; k < in; ++k) acc += double(x[i * in + k]) * double(w[o * in + k]);
      want_y[i * out + o] = acc;
      want_db[o] += dy[i * out + o];
      for (int64_t k = 0; k < in; ++k) {
        want_dx[i * in + k] += double(dy[i * out + o]) * double(w[o * in + k]);
        want_dw[o * in + k] += double(dy[i * out + o]) * double(x[i * in + k]);
      }
    }
  }
  ExpectNear("y", y, want_y, 1e-5, 1e-5);

  for (int pass = 1; pass <= 2; ++pass) {  // the second pass adds to the first
    ASSERT_THAT(lin.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, out}),
                             Tensor(d_dx, DType::kFloat32, {n, in})),
                IsOk());
    ExpectNear("dx", Down(d_dx, static_cast<size_t>(n * in)), want_dx, 1e-5, 1e-5);
    std::vector<float> dw(static_cast<size_t>(out * in)), db(static_cast<size_t>(out));
    ASSERT_THAT(DownloadParameter(stream_, *params[0], dw.data(), DType::kFloat32, true), IsOk());
    ASSERT_THAT(DownloadParameter(stream_, *params[1], db.data(), DType::kFloat32, true), IsOk());
    std::vector<double> want_w2 = want_dw, want_b2 = want_db;
    for (double& v : want_w2) v *= pass;
    for (double& v : want_b2) v *= pass;
    // bf16 gradients: rounded once per backward (8 bits of mantissa: 2^-8 relative each time).
    const double rtol = dtype == DType::kFloat32 ? 1e-5 : 2.0 * pass / 256.0;
    ExpectNear("dW pass " + std::to_string(pass), dw, want_w2, 1e-5, rtol);
    ExpectNear("db pass " + std::to_string(pass), db, want_b2, 1e-5, rtol);
  }
}

TEST_P(LinearBiasTest, AFreshBiasSlotIsWrittenNotAdded) {
  const DType dtype = GetParam();
  const int64_t n = 5, in = 4, out = 3;
  Linear lin("proj", in, out, DType::kFloat32, /*bias=*/true);
  lin.AssignNames("");
  auto storage =
      ParameterStorage::Create(device_.get(), lin.NamedParameters(), false, dtype, stream_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const auto w = RandomVector(static_cast<size_t>(out * in), 5);
  const auto b = RandomVector(static_cast<size_t>(out), 6);
  ASSERT_THAT(UploadParameter(stream_, lin.weight(), w.data(), DType::kFloat32, w.size()), IsOk());
  ASSERT_THAT(UploadParameter(stream_, *lin.bias(), b.data(), DType::kFloat32, b.size()), IsOk());
  const auto x = RandomVector(static_cast<size_t>(n * in), 7);
  const auto dy = RandomVector(static_cast<size_t>(n * out), 8);
  float* d_x = Up(x);
  float* d_y = Up(std::vector<float>(static_cast<size_t>(n * out)));
  float* d_dy = Up(dy);
  // Garbage (all bits set: NaN) in fresh slots.
  const size_t wb = static_cast<size_t>(out * in) * DTypeBytes(dtype);
  const size_t bb = static_cast<size_t>(out) * DTypeBytes(dtype);
  lin.weight().set_grad(Up(std::vector<uint8_t>(wb, 0xFF)), dtype, true);
  lin.bias()->set_grad(Up(std::vector<uint8_t>(bb, 0xFF)), dtype, true);
  ASSERT_THAT(lin.Forward(Ctx(), Tensor(d_x, DType::kFloat32, {n, in}),
                          Tensor(d_y, DType::kFloat32, {n, out})),
              IsOk());
  ASSERT_THAT(lin.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, out}), {}), IsOk());
  EXPECT_FALSE(lin.bias()->grad_fresh());
  std::vector<float> db(static_cast<size_t>(out));
  ASSERT_THAT(DownloadParameter(stream_, *lin.bias(), db.data(), DType::kFloat32, true), IsOk());
  std::vector<double> want(static_cast<size_t>(out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) want[o] += dy[i * out + o];
  ExpectNear("db from a fresh slot", db, want, 1e-5, dtype == DType::kFloat32 ? 1e-6 : 1.0 / 256);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearBiasTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(DTypeName(i.param));
                         });

}  // namespace
}  // namespace strata::nn
