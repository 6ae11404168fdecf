// Generate: the decoding loop over a CachedLm — prefill the prompts, then one Decode per new
// token for the whole batch, each sequence choosing its next token with its own Sampler, until
// every sequence has stopped: on one of the stop ids (EOS, a chat template's end tokens; the
// stop token is kept in the output) or after max_new_tokens. Tokens are handed to `on_token` as
// they are chosen (streaming). Releases nothing: the caller owns the CachedLm.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/infer/cached_lm.h"
#include "models/infer/sampler.h"

namespace strata::infer {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  // new tokens per sequence (a stop id last)
  std::vector<std::string> finish_reasons;   // "stop" (a stop id) or "length"
  double prefill_s = 0, decode_s = 0;
  int64_t decode_steps = 0;  // Decode calls (each one token for every sequence)
};

// Called with (sequence, token) for each token chosen, in order.
using TokenFn = std::function<void(int64_t sequence, int32_t token)>;

Result<GenerateResult> Generate(CachedLm& lm, const nn::RunContext& ctx,
                                const std::vector<std::vector<int32_t>>& prompts,
                                const GenerateOptions& options, const TokenFn& on_token = {});

}  // namespace strata::infer
