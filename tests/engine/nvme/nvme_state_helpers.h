// Shared set-up of the asynchronous-path tests of NvmeOptimizerState (the fused update, the slots
// by size): hyperparameters, options on a scratch directory, random arrays, the CPU tier's
// reference with the same state, and the bitwise comparison with it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/nvme/optimizer_nvme.h"
#include "engine/optim/optimizer_state.h"
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

// OptimizerState on the CPU tier with the tests' hyperparameters: the reference (null on error).
inline std::unique_ptr<OptimizerState> CpuTierReference(const PartitionLayout& layout) {
  OptimizerStateOptions ro;
  ro.hyperparams = TestHyperparams();
  ro.tier = Tier::kCpu;
  ro.pin_memory = false;
  Result<std::unique_ptr<OptimizerState>> r = OptimizerState::Create(layout, ro, nullptr, nullptr);
  return r.ok() ? std::move(r).value() : nullptr;
}

// The same random master weights and moments (N(0, 1), N(0, 0.1), |N(0, 0.01)|) in the reference
// and in s (written to NVMe and flushed).
inline Status SeedBoth(OptimizerState& ref, NvmeOptimizerState& s, size_t n, std::mt19937_64& rng) {
  const std::vector<float> p = Normal(n, rng, 1), m = Normal(n, rng, 0.1f),
                           v = Normal(n, rng, 0.01f, true);
  std::memcpy(ref.master(), p.data(), n * 4);
  std::memcpy(ref.exp_avg(), m.data(), n * 4);
  std::memcpy(ref.exp_avg_sq(), v.data(), n * 4);
  STRATA_RETURN_IF_ERROR(s.WriteState(0, p, m, v));
  return s.Flush();
}

// Reads s's whole state back (verified reads) and compares it bit for bit with the reference's:
// "" when equal, else the arrays that differ (or the read's error).
inline std::string StateDiffers(NvmeOptimizerState& s, const OptimizerState& ref, size_t n) {
  std::vector<float> p(n), m(n), v(n);
  const Status st = s.ReadState(0, n, p.data(), m.data(), v.data());
  if (!st.ok()) return st.ToString();
  std::string d;
  if (std::memcmp(p.data(), ref.master(), n * 4) != 0) d += " master";
  if (std::memcmp(m.data(), ref.exp_avg(), n * 4) != 0) d += " exp_avg";
  if (std::memcmp(v.data(), ref.exp_avg_sq(), n * 4) != 0) d += " exp_avg_sq";
  return d;
}

}  // namespace strata::nvme_test
