// OptimizerState: the fp32 half of mixed-precision training for one rank's flat partition
// (engine/partition.h) — master weights, the optimizer's moments and the fp32 gradient
// accumulator, four arrays of partition_numel floats — kept on one tier and stepped per
// sub-group by the SIMD CPU optimizer (cpu_adam/).
//
// Tiers: Tier::kCpu puts the arrays in one pinned host slab (PinnedPool: NUMA-bound, locked,
// charged to the TierBudget) — DeepSpeed's offload_optimizer.device = cpu. Tier::kDevice puts
// them in device memory; the CPU kernels then run on it directly, which needs a device whose
// memory the host can address (HostDevice). On a CUDA device that is Unimplemented until the
// device optimizer kernels exist (issue #17).
//
// Padding elements of the partition (past a parameter's end, alignment gaps) are zero in every
// array and stay zero: a zero gradient leaves a zero master weight at zero under Adam, AdamW,
// Adagrad and Lion, so they never contribute to norms or checksums.
//
// Thread safety: one thread drives it (the engine's step); StepSubGroup may run sub-groups
// concurrently from different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_adam/cpu_optimizer.h"
#include "engine/partition.h"
#include "offload/device/device.h"
#include "offload/pinned_pool.h"
#include "offload/tier.h"
#include "offload/tier_budget.h"

namespace strata {

struct OptimizerStateOptions {
  OptimizerKind kind = OptimizerKind::kAdam;
  Hyperparams hyperparams;
  Tier tier = Tier::kDevice;  // kDevice or kCpu
  bool pin_memory = true;     // kCpu: page-lock the slab (offload_optimizer.pin_memory)
  int num_threads = 0;        // CpuOptimizerOptions::num_threads
};

class OptimizerState {
 public:
  // Allocates and zeroes the four arrays for `layout`'s partition. OutOfMemory naming the tier
  // (with the bytes asked) when the device or the budget refuses.
  static Result<std::unique_ptr<OptimizerState>> Create(const PartitionLayout& layout,
                                                        const OptimizerStateOptions& options,
                                                        Device* device, TierBudget* budget);
  ~OptimizerState();

  Tier tier() const { return options_.tier; }
  size_t numel() const { return numel_; }
  size_t size_bytes() const { return 4 * numel_ * sizeof(float); }
  // The arrays (host-addressable: pinned CPU, or HostDevice memory).
  float* master() const { return base_; }
  float* exp_avg() const { return base_ + numel_; }
  float* exp_avg_sq() const { return base_ + 2 * numel_; }
  float* grad() const { return base_ + 3 * numel_; }

  // One optimizer update of elements [g.flat_begin, g.flat_end) at step number `step` (>= 1),
  // with the gradient multiplied by grad_scale first (1 / loss scale, clipping). If param_copy
  // is set, the updated weights are also written to param_copy[flat_begin, flat_end) as
  // copy_dtype (fp16/bf16: fused; fp32: a copy), where param_copy is a partition-sized
  // host-addressable array.
  Status StepSubGroup(const SubGroup& g, int64_t step, const Hyperparams& hp, float grad_scale,
                      void* param_copy, DType copy_dtype) const;

  // Sum of squares of grad()[begin, end) in double, in a fixed order (chunks of 4096 summed
  // left to right), so every placement of the same partition gives the same bits.
  double GradSquaredNorm(size_t begin, size_t end) const;
  // True if any grad()[begin, end) is Inf or NaN.
  bool GradHasNonFinite(size_t begin, size_t end) const;
  // grad()[0, numel) = 0.
  void ZeroGrad() const;

 private:
  OptimizerState(const OptimizerStateOptions& options, CpuOptimizer optimizer)
      : options_(options), optimizer_(std::move(optimizer)) {}

  OptimizerStateOptions options_;
  CpuOptimizer optimizer_;
  Device* device_ = nullptr;
  size_t numel_ = 0;
  float* base_ = nullptr;
  std::unique_ptr<PinnedPool> pool_;  // kCpu
  PinnedBuffer slab_;                 // kCpu: the one lease of pool_
};

}  // namespace strata
