#include "models/infer/generator.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace strata::infer {

Result<GenerateResult> Generate(CachedLm& lm, const nn::RunContext& ctx,
                                const std::vector<std::vector<int32_t>>& prompts,
                                const GenerateOptions& options, const TokenFn& on_token) {
  STRATA_RETURN_IF_ERROR(ValidateSampling(options.sampling));
  if (options.max_new_tokens < 0) {
    return InvalidArgumentError("--max-new-tokens must be >= 0, got " +
                                std::to_string(options.max_new_tokens));
  }
  using Clock = std::chrono::steady_clock;
  const size_t batch = prompts.size();
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  GenerateResult r;
  r.tokens.resize(batch);
  r.finish_reasons.assign(batch, "length");
  if (options.max_new_tokens == 0) return r;
  std::vector<Sampler> samplers;
  for (size_t b = 0; b < batch; ++b)
    samplers.emplace_back(options.sampling, static_cast<int64_t>(b));
  std::vector<bool> done(batch, false);
  std::vector<int32_t> next(batch, 0);
  std::vector<float> logits;
  auto t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(lm.Prefill(ctx, prompts, &logits));
  r.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int64_t step = 0;; ++step) {
    size_t live = 0;
    for (size_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      const int32_t tok =
          samplers[b].Next(std::span<const float>(logits).subspan(b * vocab, vocab));
      next[b] = tok;
      r.tokens[b].push_back(tok);
      if (on_token) on_token(static_cast<int64_t>(b), tok);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), tok) !=
          options.stop_ids.end()) {
        done[b] = true;
        r.finish_reasons[b] = "stop";
      } else if (static_cast<int64_t>(r.tokens[b].size()) >= options.max_new_tokens) {
        done[b] = true;
      } else {
        ++live;
      }
    }
    if (live == 0) break;
    STRATA_RETURN_IF_ERROR(lm.Decode(ctx, next, &logits));
    ++r.decode_steps;
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace strata::infer
