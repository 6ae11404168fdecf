// Choosing the next token from logits: greedy (temperature 0) or sampled as Hugging Face's
// generate does it — logits / temperature, then top-k, then top-p (nucleus), then a draw from
// the softmax of what is left. Draws come from a per-sequence SplitMix64 stream seeded from
// (seed, sequence index), so a run is reproducible under a seed on any platform and a sequence's
// tokens do not depend on the other sequences of its batch.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace strata::infer {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, the lowest id on ties)
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off; the smallest set whose probability reaches top_p
  uint64_t seed = 0;
};

// InvalidArgument naming the option (temperature >= 0, top_k >= 0, 0 < top_p <= 1).
Status ValidateSampling(const SamplingOptions& o);

class Sampler {
 public:
  Sampler(const SamplingOptions& options, int64_t sequence);
  // The next token for `logits` [vocab].
  int32_t Next(std::span<const float> logits);

 private:
  double Uniform();  // [0, 1)
  SamplingOptions o_;
  uint64_t state_;
};

}  // namespace strata::infer
