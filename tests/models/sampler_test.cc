// infer::Sampler against probabilities computed here from the definitions (Hugging Face's
// temperature, top-k and top-p warpers): 40000 draws per setting, each token's frequency within
// 5 standard deviations of its probability (deterministic under the fixed seed), tokens outside
// the kept set never drawn; greedy is the argmax with the lowest id on ties.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/infer/sampler.h"
#include "tests/support/status_matchers.h"

namespace strata::infer {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.5f, -1.0f, 3.0f, 0.0f, 2.0f};

// The distribution the options define: softmax(logits / T) over the top_k highest logits, then
// the smallest highest-first set whose mass reaches top_p, renormalised.
std::vector<double> Expected(double t, int64_t top_k, double top_p) {
  const size_t n = kLogits.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [](size_t a, size_t b) { return kLogits[a] > kLogits[b]; });
  const size_t k = top_k > 0 ? static_cast<size_t>(top_k) : n;
  std::vector<double> p(n, 0.0);
  double z = 0;
  for (size_t j = 0; j < k; ++j) z += std::exp(kLogits[order[j]] / t);
  double cum = 0, kept = 0;
  for (size_t j = 0; j < k; ++j) {
    const double q = std::exp(kLogits[order[j]] / t) / z;
    p[order[j]] = q;
    kept += q;
    cum += q;
    if (cum >= top_p) break;
  }
  for (double& q : p) q /= kept;
  return p;
}

void ExpectDraws(double t, int64_t top_k, double top_p) {
  SamplingOptions o;
  o.temperature = t, o.top_k = top_k, o.top_p = top_p, o.seed = 5;
  Sampler s(o, 0);
  constexpr int kDraws = 40000;
  std::vector<int> count(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++count[static_cast<size_t>(s.Next(kLogits))];
  const std::vector<double> p = Expected(t, top_k, top_p);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    const double sd = std::sqrt(kDraws * p[i] * (1 - p[i]));
    EXPECT_NEAR(count[i], kDraws * p[i], 5 * sd + 1)
        << "token " << i << " at T=" << t << " top_k=" << top_k << " top_p=" << top_p;
  }
}

TEST(SamplerTest, GreedyTakesTheFirstMaximum) {
  Sampler s(SamplingOptions{}, 0);
  EXPECT_EQ(s.Next(kLogits), 1);  // 3.0 at ids 1 and 5
}

TEST(SamplerTest, TemperatureAloneDrawsTheSoftmax) { ExpectDraws(1.0, 0, 1.0); }
TEST(SamplerTest, HighTemperatureFlattens) { ExpectDraws(3.0, 0, 1.0); }
TEST(SamplerTest, TopKKeepsTheKHighest) { ExpectDraws(1.0, 3, 1.0); }
TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) { ExpectDraws(0.7, 0, 0.8); }
TEST(SamplerTest, TopKThenTopP) { ExpectDraws(1.3, 5, 0.9); }

TEST(SamplerTest, SameSeedSameDrawsAndSequencesDiffer) {
  SamplingOptions o;
  o.temperature = 1.0, o.seed = 9;
  Sampler a(o, 0), b(o, 0), c(o, 1);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(a.Next(kLogits));
    db.push_back(b.Next(kLogits));
    dc.push_back(c.Next(kLogits));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(SamplerTest, RefusesOptionsOutOfRange) {
  using ::strata::testing::StatusIs;
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_THAT(ValidateSampling(o),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("--temperature")));
  o = {};
  o.top_k = -2;
  EXPECT_THAT(ValidateSampling(o),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("--top-k")));
  o = {};
  o.top_p = 0;
  EXPECT_THAT(ValidateSampling(o),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("--top-p")));
}

}  // namespace
}  // namespace strata::infer
