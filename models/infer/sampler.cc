#include "models/infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata::infer {

Status ValidateSampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return InvalidArgumentError("--temperature must be >= 0 (0: greedy), got " +
                                std::to_string(o.temperature));
  }
  if (o.top_k < 0) {
    return InvalidArgumentError("--top-k must be >= 0 (0: off), got " + std::to_string(o.top_k));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return InvalidArgumentError("--top-p must be in (0, 1] (1: off), got " +
                                std::to_string(o.top_p));
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplingOptions& options, int64_t sequence)
    : o_(options), state_(options.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(sequence)) {}

double Sampler::Uniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::Next(std::span<const float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  if (o_.temperature == 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Ids by logit, highest first (the lower id first on ties), cut to top_k.
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = o_.top_k > 0 ? std::min(o_.top_k, vocab) : vocab;
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), higher);
  // Softmax of logits / temperature over the kept ids (in double).
  std::vector<double> p(static_cast<size_t>(keep));
  const double mx = logits[ids[0]] / o_.temperature;
  double sum = 0;
  for (int64_t j = 0; j < keep; ++j) {
    p[static_cast<size_t>(j)] = std::exp(logits[ids[static_cast<size_t>(j)]] / o_.temperature - mx);
    sum += p[static_cast<size_t>(j)];
  }
  // top-p: the smallest prefix whose probability reaches top_p (at least one id).
  if (o_.top_p < 1) {
    double cum = 0;
    int64_t j = 0;
    while (j < keep) {
      cum += p[static_cast<size_t>(j)] / sum;
      ++j;
      if (cum >= o_.top_p) break;
    }
    keep = j;
    sum = 0;
    for (int64_t t = 0; t < keep; ++t) sum += p[static_cast<size_t>(t)];
  }
  const double u = Uniform() * sum;
  double cum = 0;
  for (int64_t j = 0; j < keep; ++j) {
    cum += p[static_cast<size_t>(j)];
    if (u < cum) return ids[static_cast<size_t>(j)];
  }
  return ids[static_cast<size_t>(keep - 1)];
}

}  // namespace strata::infer
