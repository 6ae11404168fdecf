// The engine's step checked against an independent reference: the same model driven by a bare
// loop (forward, backward, gradient download) with clipping and AdamW written here in double
// precision, following DeepSpeed's and PyTorch's formulas — not the engine's or cpu_adam's code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/train/engine_fixture.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;

// MakeConfig's optimizer and clipping. The optimizer takes its hyperparameters as float, as
// DeepSpeed's CPU Adam does: the reference rounds them the same way (1 - 0.999 differs by 1.3e-5
// relative between the double and the float value of beta2, which would dominate the check).
constexpr double F(double x) { return static_cast<double>(static_cast<float>(x)); }
constexpr double kLr = F(0.01), kWd = F(0.1), kB1 = F(0.9), kB2 = F(0.999), kEps = F(1e-8);
constexpr double kClip = 0.5;

// Each step is checked from identical inputs: the reference model is loaded with the engine's
// weights before the step (so both see bit-identical gradients), keeps its own Adam moments in
// double, and predicts the engine's weights after the step. Over several steps this covers the
// bias correction, the clip and the decoupled decay at every step number, without letting
// Adam amplify last-bit differences between two diverging runs.
TEST(EngineReferenceTest, EveryStepMatchesADoublePrecisionAdamW) {
  const testing::TokenData data = testing::RandomTokens(23, 4, 2, 16, 256);
  const int steps = 4;

  auto device = testing::MakeHostDevice();
  auto comm = testing::MakeLocalComm();
  auto model = testing::MakeTinyModel(device.get(), DType::kFloat32);
  Config config =
      testing::MakeConfig(2, 1, "\"stage\": 1, \"offload_optimizer\": {\"device\": \"cpu\"}");
  EngineInit init;
  init.init_param = testing::TestInit(9);
  auto engine = Engine::Initialize(*model, config, *comm, *device, init);
  ASSERT_THAT(engine.status(), IsOk());

  llama::LlamaModelOptions o;
  auto ref_model =
      llama::LlamaForCausalLM::Create(llama::LlamaPreset("tiny").value(), device.get(), o);
  ASSERT_THAT(ref_model.status(), IsOk());
  auto stream = device->CreateStream().value();
  nn::RunContext ctx{device.get(), stream, true};
  std::vector<nn::Parameter*> params = (*ref_model)->NamedParameters();
  std::vector<std::vector<double>> m(params.size()), v(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    m[i].assign(static_cast<size_t>(params[i]->numel()), 0.0);
    v[i].assign(static_cast<size_t>(params[i]->numel()), 0.0);
  }
  double clipped_steps = 0;
  for (int t = 1; t <= steps; ++t) {
    // The engine's weights before the step, into the reference model.
    std::vector<std::vector<float>> before(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      before[i].resize(static_cast<size_t>(params[i]->numel()));
      ASSERT_THAT((*engine)->GatherMasterParameter(i, before[i]), IsOk());
      ASSERT_THAT(nn::UploadParameter(stream, *params[i], before[i].data(), DType::kFloat32,
                                      before[i].size()),
                  IsOk());
    }
    ASSERT_THAT((*ref_model)->ZeroGrads(ctx), IsOk());
    ASSERT_THAT((*ref_model)->Forward(ctx, data.Batch(static_cast<size_t>(t - 1))), IsOk());
    ASSERT_THAT((*ref_model)->Backward(ctx, 1.0f), IsOk());
    std::vector<std::vector<float>> grads(params.size());
    double sq = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      grads[i].resize(before[i].size());
      ASSERT_THAT(nn::DownloadParameter(stream, *params[i], grads[i].data(), DType::kFloat32,
                                        /*grad=*/true),
                  IsOk());
      for (float g : grads[i]) sq += double(g) * g;
    }
    const double norm = std::sqrt(sq);
    const double coef = (norm + 1e-6) / kClip;  // DeepSpeed: divide when the ratio exceeds 1
    const double divisor = coef > 1 ? coef : 1.0;
    clipped_steps += coef > 1;
    const double bc1 = 1 - std::pow(kB1, t), bc2 = 1 - std::pow(kB2, t);

    ASSERT_THAT((*engine)->Forward(data.Batch(static_cast<size_t>(t - 1))), IsOk());
    ASSERT_THAT((*engine)->Backward(), IsOk());
    ASSERT_THAT((*engine)->Step(), IsOk());
    EXPECT_NEAR((*engine)->stats().last_grad_norm, norm, 1e-5 * norm) << "step " << t;

    double worst = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> after(before[i].size());
      ASSERT_THAT((*engine)->GatherMasterParameter(i, after), IsOk());
      for (size_t j = 0; j < after.size(); ++j) {
        const double g = grads[i][j] / divisor;
        m[i][j] = kB1 * m[i][j] + (1 - kB1) * g;
        v[i][j] = kB2 * v[i][j] + (1 - kB2) * g * g;
        double p = before[i][j];
        p *= 1 - kLr * kWd;  // decoupled weight decay (AdamW)
        p -= kLr * (m[i][j] / bc1) / (std::sqrt(v[i][j] / bc2) + kEps);
        // In units of the result's fp32 spacing (2^-23 relative), plus the update's own
        // arithmetic (a few roundings of a step <= lr = 0.01: ~1e-9 each).
        const double ulp = std::max(std::fabs(p), 1e-30) * 0x1p-23;
        worst = std::max(worst, std::fabs(after[j] - p) / (ulp + 1e-9));
      }
    }
    // One step in fp32 against double from the same inputs: the result is rounded once to fp32
    // (half a spacing) after a few roundings inside the update; 4 units leave a margin and still
    // catch any wrong constant (a wrong bias correction, clip or decay moves weights by >= 1e-5,
    // hundreds of units, here).
    EXPECT_LT(worst, 4.0) << "step " << t;
  }
  EXPECT_GT(clipped_steps, 0) << "the test should exercise clipping (gradient_clipping 0.5)";
  ASSERT_THAT(device->DestroyStream(stream), IsOk());
}

}  // namespace
}  // namespace strata
