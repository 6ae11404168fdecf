#include "models/llama/llama_init.h"

#include <algorithm>
#include <random>

namespace strata::llama {

std::function<Status(const nn::Parameter& p, std::span<float> out)> RandomInit(uint64_t seed) {
  return [seed](const nn::Parameter& p, std::span<float> out) -> Status {
    if (p.name().ends_with("norm.weight")) {
      std::fill(out.begin(), out.end(), 1.0f);
      return Status::Ok();
    }
    if (p.name().ends_with(".bias")) {  // Qwen2's q/k/v biases start at zero, as transformers'
      std::fill(out.begin(), out.end(), 0.0f);
      return Status::Ok();
    }
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(p.index()));
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (float& x : out) x = d(rng);
    return Status::Ok();
  };
}

}  // namespace strata::llama
