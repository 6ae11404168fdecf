// Modules: Hugging Face-style names and parameter order, hooks, parameter placement and
// conversion, Linear against a double reference and finite differences, the pinned stash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/half.h"
#include "nn/modules/layers/linear.h"
#include "nn/modules/layers/module_list.h"
#include "nn/modules/layers/rms_norm.h"
#include "nn/tensor/parameter_storage.h"
#include "nn/tensor/pinned_stash.h"
#include "tests/nn/nn_test_util.h"
#include "tests/support/status_matchers.h"

namespace strata::nn {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Block final : public UnaryModule {
 public:
  explicit Block(std::string name)
      : UnaryModule(std::move(name)),
        norm("norm", 4, 1e-5, DType::kFloat32),
        proj("proj", 4, 3, DType::kFloat32) {
    RegisterModule(&norm);
    RegisterModule(&proj);
  }
  const char* type_name() const override { return "Block"; }
  RmsNorm norm;
  Linear proj;

 protected:
  Status DoForward(const RunContext&, const Tensor&, const Tensor&) override {
    return Status::Ok();
  }
  Status DoBackward(const RunContext&, const Tensor&, const Tensor&) override {
    return Status::Ok();
  }
};

class Root final : public Module {
 public:
  Root() : Module(""), list("blocks"), a("0"), b("1") {
    RegisterModule(&list);
    list.Append(&a);
    list.Append(&b);
    AssignNames();
  }
  const char* type_name() const override { return "Root"; }
  ModuleList list;
  Block a, b;
};

class ModuleTest : public ::strata::testing::NnTest {};

TEST_F(ModuleTest, NamesAreDottedPathsInDefinitionOrder) {
  Root r;
  std::vector<std::string> names;
  for (Parameter* p : r.NamedParameters())
    names.push_back(p->name() + "#" + std::to_string(p->index()));
  EXPECT_THAT(names, ElementsAre("blocks.0.norm.weight#0", "blocks.0.proj.weight#1",
                                 "blocks.1.norm.weight#2", "blocks.1.proj.weight#3"));
  EXPECT_EQ(r.b.proj.name(), "blocks.1.proj");
  EXPECT_EQ(r.FindParameter("blocks.1.norm.weight"), &r.b.norm.weight());
  EXPECT_EQ(r.FindParameter("blocks.2.norm.weight"), nullptr);
  EXPECT_EQ(r.Modules().size(), 8u);  // root, list, 2 x (block, norm, proj)
}

class Log : public ModuleHooks {
 public:
  Status OnHook(HookPoint p, Module& m, const RunContext&) override {
    events.push_back(std::string(HookPointName(p)) + " " + m.name());
    return Status::Ok();
  }
  std::vector<std::string> events;
};

TEST_F(ModuleTest, HooksRunAroundUnaryModulesAndCanBeRemoved) {
  Root r;
  Log log;
  r.AddHooksRecursive(&log);
  ASSERT_THAT(r.a.Forward(Ctx(), Tensor(), Tensor()), IsOk());
  ASSERT_THAT(r.a.Backward(Ctx(), Tensor(), Tensor()), IsOk());
  EXPECT_THAT(log.events, ElementsAre("pre_forward blocks.0", "post_forward blocks.0",
                                      "pre_backward blocks.0", "post_backward blocks.0"));
  r.RemoveHooksRecursive(&log);
  ASSERT_THAT(r.a.Forward(Ctx(), Tensor(), Tensor()), IsOk());
  EXPECT_EQ(log.events.size(), 4u);
}

TEST_F(ModuleTest, StoragePlacesParametersAndConvertsOnUploadAndDownload) {
  Root r;
  Linear bf("bf", 4, 2, DType::kBFloat16);
  bf.AssignNames("head");
  std::vector<Parameter*> params = r.NamedParameters();
  params.push_back(&bf.weight());
  {
    auto s = ParameterStorage::Create(device_.get(), params, true, DType::kFloat32, stream_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (Parameter* p : params) {
      EXPECT_NE(p->data(), nullptr) << p->name();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p->data()) % 256, 0u) << p->name();
    }
    const std::vector<float> v = {1.0f, -2.5f, 3.0e-3f, 7.0f, 0.1f, 0.2f, 0.3f, 0.4f};
    ASSERT_THAT(UploadParameter(stream_, bf.weight(), v.data(), DType::kFloat32, v.size()), IsOk());
    std::vector<uint16_t> raw(8);
    ASSERT_THAT(DownloadParameter(stream_, bf.weight(), raw.data(), DType::kBFloat16), IsOk());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(raw[i], FloatToBf16(v[i])) << i;
    std::vector<float> grad(8, 1.0f);
    ASSERT_THAT(DownloadParameter(stream_, bf.weight(), grad.data(), DType::kFloat32, true),
                IsOk());
    EXPECT_THAT(grad, ::testing::Each(0.0f));  // zeroed at placement
    EXPECT_THAT(
        UploadParameter(stream_, bf.weight(), v.data(), DType::kFloat32, 3),
        StatusIs(StatusCode::kInvalidArgument,
                 HasSubstr("upload head.weight: 3 elements given, the parameter [2, 4] has 8")));
  }
  EXPECT_EQ(bf.weight().data(), nullptr);  // storage gone: the parameter is unplaced again
}

TEST_F(ModuleTest, LinearMatchesReferenceAndAccumulatesWeightGradient) {
  Linear lin("lin", 5, 3, DType::kFloat32);
  lin.AssignNames("");
  auto storage =
      ParameterStorage::Create(device_.get(), {&lin.weight()}, true, DType::kFloat32, stream_);
  ASSERT_TRUE(storage.ok());
  const auto w = ::strata::testing::RandomVector(15, 1), x = ::strata::testing::RandomVector(20, 2);
  const auto dy = ::strata::testing::RandomVector(12, 3);
  ASSERT_THAT(UploadParameter(stream_, lin.weight(), w.data(), DType::kFloat32, 15), IsOk());
  float* d_x = Up(x);
  float* y = Up(std::vector<float>(12));
  float* dx = Up(std::vector<float>(20));
  ASSERT_THAT(
      lin.Forward(Ctx(), Tensor(d_x, DType::kFloat32, {4, 5}), Tensor(y, DType::kFloat32, {4, 3})),
      IsOk());
  std::vector<double> want(12);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 3; ++o)
      for (int k = 0; k < 5; ++k) want[i * 3 + o] += double(x[i * 5 + k]) * w[o * 5 + k];
  ::strata::testing::ExpectNear("y", Down(y, 12), want, 1e-6, 1e-6);
  for (int rep = 0; rep < 2; ++rep) {  // twice: the weight gradient doubles
    ASSERT_THAT(lin.Backward(Ctx(), Tensor(Up(dy), DType::kFloat32, {4, 3}),
                             Tensor(dx, DType::kFloat32, {4, 5})),
                IsOk());
  }
  std::vector<float> gw(15);
  ASSERT_THAT(DownloadParameter(stream_, lin.weight(), gw.data(), DType::kFloat32, true), IsOk());
  auto loss_w = [&](const std::vector<double>& wv) {
    double s = 0;
    for (int i = 0; i < 4; ++i)
      for (int o = 0; o < 3; ++o)
        for (int k = 0; k < 5; ++k) s += 2.0 * x[i * 5 + k] * wv[o * 5 + k] * dy[i * 3 + o];
    return s;
  };
  ::strata::testing::ExpectGradientMatchesFiniteDifferences(
      "d w (two backwards)", ::strata::testing::ToDouble(w), loss_w, gw);
  auto loss_x = [&](const std::vector<double>& xv) {
    double s = 0;
    for (int i = 0; i < 4; ++i)
      for (int o = 0; o < 3; ++o)
        for (int k = 0; k < 5; ++k) s += xv[i * 5 + k] * w[o * 5 + k] * dy[i * 3 + o];
    return s;
  };
  ::strata::testing::ExpectGradientMatchesFiniteDifferences(
      "d x (overwritten)", ::strata::testing::ToDouble(x), loss_x, Down(dx, 20));
}

TEST_F(ModuleTest, PinnedStashRoundTripsActivations) {
  auto stash = PinnedStash::Create(device_.get(), 64 * sizeof(float), 2);
  ASSERT_TRUE(stash.ok()) << stash.status().ToString();
  const auto v = ::strata::testing::RandomVector(64, 4);
  float* src = Up(v);
  float* dst = Up(std::vector<float>(64));
  ASSERT_THAT((*stash)->Save(stream_, 1, Tensor(src, DType::kFloat32, {64})), IsOk());
  ASSERT_THAT((*stash)->Restore(stream_, 1, Tensor(dst, DType::kFloat32, {64})), IsOk());
  EXPECT_EQ(Down(dst, 64), v);
  EXPECT_THAT((*stash)->Save(stream_, 2, Tensor(src, DType::kFloat32, {64})),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("slot 2 of 2")));
}

}  // namespace
}  // namespace strata::nn
