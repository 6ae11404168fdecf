// Fresh gradient slots (nn/tensor/parameter.h: Note [Fresh gradient slots]): a slot handed over
// fresh holds garbage (NaN here) and the first backward writes it; the gradients equal, bit for
// bit, those accumulated into a zeroed slot, for every module that writes a parameter gradient
// (Linear with fp32 and bf16 slots, RmsNorm, Embedding with a repeated id), and the second
// backward adds. Linear's dW is also checked against a double-precision dy^T x.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "nn/modules/layers/embedding.h"
#include "nn/modules/layers/linear.h"
#include "nn/modules/layers/rms_norm.h"
#include "nn/tensor/parameter_storage.h"
#include "offload/device/api/kernels.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::RandomVector;

class FreshGradTest : public ::strata::testing::NnTest {
 protected:
  // A device slot of p.numel() elements of `dtype`, every byte 0xFF (NaN in fp32 and bf16).
  void* GarbageSlot(const Parameter& p, DType dtype) {
    const size_t bytes = static_cast<size_t>(p.numel()) * DTypeBytes(dtype);
    std::vector<uint8_t> nan(bytes, 0xFF);
    return Up(nan);
  }
  std::vector<uint8_t> Bytes(const void* slot, const Parameter& p, DType dtype) {
    return Down(static_cast<const uint8_t*>(slot),
                static_cast<size_t>(p.numel()) * DTypeBytes(dtype));
  }
  // Runs `backward` twice on p, once from a zeroed slot (accumulating) and once from a fresh
  // garbage slot, and expects the same bytes after each of the two passes.
  template <typename Backward>
  void ExpectFreshEqualsZeroed(Parameter& p, DType dtype, const Backward& backward,
                               std::vector<float>* first_pass = nullptr) {
    const size_t bytes = static_cast<size_t>(p.numel()) * DTypeBytes(dtype);
    void* zeroed = Up(std::vector<uint8_t>(bytes, 0));
    void* fresh = GarbageSlot(p, dtype);
    std::vector<std::vector<uint8_t>> want, got;
    p.set_grad(zeroed, dtype);
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_THAT(backward(), IsOk());
      want.push_back(Bytes(zeroed, p, dtype));
    }
    p.set_grad(fresh, dtype, /*fresh=*/true);
    ASSERT_TRUE(p.grad_fresh());
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_THAT(backward(), IsOk());
      EXPECT_FALSE(p.grad_fresh()) << p.name();
      got.push_back(Bytes(fresh, p, dtype));
      if (pass == 0 && first_pass != nullptr && dtype == DType::kFloat32) {
        first_pass->resize(static_cast<size_t>(p.numel()));
        std::memcpy(first_pass->data(), got.back().data(), bytes);
      }
    }
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT_TRUE(want[pass] == got[pass]) << p.name() << " " << DTypeName(dtype) << " pass "
                                           << pass << ": fresh and zeroed slots differ";
    }
    // Two passes added: the second is not a copy of the first (it accumulated).
    EXPECT_FALSE(got[0] == got[1]) << p.name();
  }
};

TEST_F(FreshGradTest, LinearWritesAFreshSlotAsAZeroedOneIsAccumulated) {
  const int64_t n = 37, in = 48, out = 40;  // panels: several rows of C per GEMM call
  Linear lin("lin", in, out, DType::kFloat32);
  lin.AssignNames("");
  auto storage =
      ParameterStorage::Create(device_.get(), {&lin.weight()}, false, DType::kFloat32, stream_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const auto w = RandomVector(static_cast<size_t>(out * in), 11);
  const auto x = RandomVector(static_cast<size_t>(n * in), 12);
  const auto dy = RandomVector(static_cast<size_t>(n * out), 13);
  ASSERT_THAT(UploadParameter(stream_, lin.weight(), w.data(), DType::kFloat32, w.size()), IsOk());
  float* d_x = Up(x);
  float* y = Up(std::vector<float>(static_cast<size_t>(n * out)));
  float* d_dy = Up(dy);
  ASSERT_THAT(lin.Forward(Ctx(), Tensor(d_x, DType::kFloat32, {n, in}),
                          Tensor(y, DType::kFloat32, {n, out})),
              IsOk());
  auto backward = [&] { return lin.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, out}), {}); };
  std::vector<float> dw;
  ExpectFreshEqualsZeroed(lin.weight(), DType::kFloat32, backward, &dw);
  ExpectFreshEqualsZeroed(lin.weight(), DType::kBFloat16, backward);
  std::vector<double> want(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k)
      for (int64_t i = 0; i < n; ++i)
        want[o * in + k] += double(dy[i * out + o]) * double(x[i * in + k]);
  ::strata::testing::ExpectNear("dW from a fresh slot", dw, want, 1e-5, 1e-5);
}

TEST_F(FreshGradTest, RmsNormAndEmbeddingZeroAFreshSlotBeforeAdding) {
  const int64_t n = 9, dim = 24, vocab = 30;
  RmsNorm norm("norm", dim, 1e-5, DType::kFloat32);
  Embedding emb("emb", vocab, dim, DType::kFloat32);
  norm.AssignNames("");
  emb.AssignNames("");
  auto storage = ParameterStorage::Create(device_.get(), {&norm.weight(), &emb.weight()}, false,
                                          DType::kFloat32, stream_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const auto nw = RandomVector(static_cast<size_t>(dim), 21);
  const auto table = RandomVector(static_cast<size_t>(vocab * dim), 22);
  ASSERT_THAT(UploadParameter(stream_, norm.weight(), nw.data(), DType::kFloat32, nw.size()),
              IsOk());
  ASSERT_THAT(UploadParameter(stream_, emb.weight(), table.data(), DType::kFloat32, table.size()),
              IsOk());
  const auto x = RandomVector(static_cast<size_t>(n * dim), 23);
  const auto dy = RandomVector(static_cast<size_t>(n * dim), 24);
  float* d_x = Up(x);
  float* y = Up(std::vector<float>(static_cast<size_t>(n * dim)));
  float* dx = Up(std::vector<float>(static_cast<size_t>(n * dim)));
  float* d_dy = Up(dy);
  ASSERT_THAT(norm.Forward(Ctx(), Tensor(d_x, DType::kFloat32, {n, dim}),
                           Tensor(y, DType::kFloat32, {n, dim})),
              IsOk());
  ExpectFreshEqualsZeroed(norm.weight(), DType::kFloat32, [&] {
    return norm.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, dim}),
                         Tensor(dx, DType::kFloat32, {n, dim}));
  });

  const std::vector<int32_t> ids = {3, 7, 3, 0, 29, 12, 7, 7, 5};  // repeats add up
  int32_t* d_ids = Up(ids);
  float* out = Up(std::vector<float>(static_cast<size_t>(n * dim)));
  ASSERT_THAT(emb.Forward(Ctx(), d_ids, n, Tensor(out, DType::kFloat32, {n, dim})), IsOk());
  std::vector<float> dt;
  ExpectFreshEqualsZeroed(
      emb.weight(), DType::kFloat32,
      [&] {
        return emb.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, dim}));
      },
      &dt);
  // Rows no id names are zero (not the slot's NaN); row 7 holds three rows of dy.
  for (int64_t c = 0; c < dim; ++c) {
    EXPECT_EQ(dt[static_cast<size_t>(1 * dim + c)], 0.0f);
    const double want7 = double(dy[1 * dim + c]) + dy[6 * dim + c] + dy[7 * dim + c];
    EXPECT_NEAR(dt[static_cast<size_t>(7 * dim + c)], want7, 1e-5);
  }
}

TEST_F(FreshGradTest, ZeroGradIfFreshZeroesOnlyAFreshSlot) {
  Parameter p(Shape({5, 3}), DType::kFloat32);
  void* slot = GarbageSlot(p, DType::kFloat32);
  p.set_grad(slot, DType::kFloat32);  // not fresh: left alone
  ASSERT_THAT(ZeroGradIfFresh(stream_, p), IsOk());
  EXPECT_TRUE(std::isnan(Down(static_cast<float*>(slot), 15)[0]));
  p.set_grad(slot, DType::kFloat32, /*fresh=*/true);
  ASSERT_THAT(ZeroGradIfFresh(stream_, p), IsOk());
  EXPECT_FALSE(p.grad_fresh());
  for (float v : Down(static_cast<float*>(slot), 15)) EXPECT_EQ(v, 0.0f);
  p.set_grad(nullptr, DType::kFloat32, /*fresh=*/true);  // no slot: never fresh
  EXPECT_FALSE(p.grad_fresh());
}

// Note [Touched rows]: given host ids, the embedding lists its rows sorted and unique; with
// grad_rows_only a fresh slot is zeroed in those rows only (the rest keeps its NaN: no one reads
// it), and the touched rows hold exactly what a whole zeroed slot would.
TEST_F(FreshGradTest, EmbeddingListsItsTouchedRowsAndZeroesOnlyThoseWhenAsked) {
  const int64_t n = 9, dim = 6, vocab = 30;
  Embedding emb("emb", vocab, dim, DType::kFloat32);
  emb.AssignNames("");
  EXPECT_FALSE(emb.BackwardReadsParameters());
  auto storage =
      ParameterStorage::Create(device_.get(), {&emb.weight()}, false, DType::kFloat32, stream_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const auto table = RandomVector(static_cast<size_t>(vocab * dim), 31);
  ASSERT_THAT(UploadParameter(stream_, emb.weight(), table.data(), DType::kFloat32, table.size()),
              IsOk());
  const std::vector<int32_t> ids = {12, 7, 3, 0, 29, 12, 7, 8, 5};
  int32_t* d_ids = Up(ids);
  float* out = Up(std::vector<float>(static_cast<size_t>(n * dim)));
  const Tensor out_t(out, DType::kFloat32, {n, dim});
  ASSERT_THAT(emb.Forward(Ctx(), d_ids, n, out_t, ids), IsOk());
  const std::vector<int32_t> rows = {0, 3, 5, 7, 8, 12, 29};
  EXPECT_EQ(
      std::vector<int32_t>(emb.weight().touched_rows().begin(), emb.weight().touched_rows().end()),
      rows);
  const std::vector<RowRun> runs = RowRuns(emb.weight().touched_rows());
  ASSERT_EQ(runs.size(), 6u);  // {0}, {3}, {5}, {7, 8}, {12}, {29}
  EXPECT_EQ(runs[3].first, 7);
  EXPECT_EQ(runs[3].count, 2);

  const auto dy = RandomVector(static_cast<size_t>(n * dim), 32);
  float* d_dy = Up(dy);
  Parameter& w = emb.weight();
  void* zeroed = Up(std::vector<float>(static_cast<size_t>(vocab * dim), 0.0f));
  w.set_grad(zeroed, DType::kFloat32);
  ASSERT_THAT(emb.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, dim})), IsOk());
  const std::vector<float> want = Down(static_cast<float*>(zeroed), vocab * dim);
  void* fresh = GarbageSlot(w, DType::kFloat32);
  w.set_grad(fresh, DType::kFloat32, /*fresh=*/true);
  w.set_grad_rows_only(true);
  ASSERT_THAT(emb.Backward(Ctx(), Tensor(d_dy, DType::kFloat32, {n, dim})), IsOk());
  const std::vector<float> got = Down(static_cast<float*>(fresh), vocab * dim);
  for (int64_t r = 0; r < vocab; ++r) {
    const bool touched = std::find(rows.begin(), rows.end(), r) != rows.end();
    for (int64_t c = 0; c < dim; ++c) {
      const size_t k = static_cast<size_t>(r * dim + c);
      if (touched) {
        EXPECT_EQ(std::memcmp(&got[k], &want[k], sizeof(float)), 0) << "row " << r;
      } else {
        EXPECT_TRUE(std::isnan(got[k])) << "row " << r << " was written";
      }
    }
  }

  // Without host ids every row is touched (none listed); a bad host id is an error naming it.
  ASSERT_THAT(emb.Forward(Ctx(), d_ids, n, out_t), IsOk());
  EXPECT_TRUE(emb.weight().touched_rows().empty());
  std::vector<int32_t> bad = ids;
  bad[4] = 30;
  EXPECT_THAT(emb.Forward(Ctx(), d_ids, n, out_t, bad),
              ::strata::testing::StatusIs(
                  StatusCode::kInvalidArgument,
                  ::testing::HasSubstr("token id 30 at position 4 is outside [0, 30)")));
}

}  // namespace
}  // namespace strata::nn
