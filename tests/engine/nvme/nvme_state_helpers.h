// Shared set-up of the asynchronous-path tests of NvmeOptimizerState (the fused update, the slots
// by size): hyperparameters, options on a scratch directory, random arrays.
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "engine/optimizer_nvme.h"
#include "tests/support/test_util.h"

namespace strata::nvme_test {

inline Hyperparams TestHyperparams() {
  Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
  hp.lr = 1e-2f;
  hp.weight_decay = 0.01f;
  return hp;
}

inline NvmeOptimizerStateOptions Options(const ::strata::testing::ScratchDir& dir, size_t buffers,
                                         bool checksums) {
  NvmeOptimizerStateOptions o;
  o.hyperparams = TestHyperparams();
  o.nvme_paths = {dir.path().string()};
  o.pin_memory = false;
  o.buffer_count = buffers;
  o.checksums = checksums;
  o.aio.block_size = 256 << 10;
  return o;
}

inline std::vector<float> Normal(size_t n, std::mt19937_64& rng, float scale,
                                 bool positive = false) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = positive ? std::abs(d(rng)) : d(rng);
  return v;
}

}  // namespace strata::nvme_test
