// OptimizerState: the fp32 half of mixed-precision training for one rank's flat partition
// (engine/partition.h) — master weights, the optimizer's moments and the fp32 gradient
// accumulator, four arrays of partition_numel floats — kept on one tier and stepped per
// sub-group by the SIMD CPU optimizer (cpu_adam/).
//
// Tiers: Tier::kCpu puts the arrays in one pinned host slab (PinnedPool: NUMA-bound, locked,
// charged to the TierBudget) — DeepSpeed's offload_optimizer.device = cpu. Tier::kDevice puts
// them in device memory. Where the host can address that memory (HostDevice,
// caps().host_accessible_memory) the CPU kernels run on it directly; where it cannot (a GPU, or
// HostDevice with opaque_memory) every operation is a device kernel (offload/device/
// optimizer_kernels.h) on the state's own stream, and host_addressable() is false: the arrays
// are then read and written through Read/Write, never dereferenced.
//
// Same math: the step equals CpuOptimizer's (bitwise on the host backend, to FMA rounding on
// CUDA), and the squared norm has the same bits on every tier and device (Note [Squared-norm
// order] in offload/device/optimizer_kernel_args.h).
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
#include <mutex>
#include <span>
#include <vector>

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
  bool host_addressable() const { return !device_kernels_; }
  // True if the arrays below may be dereferenced by the host (the cpu tier, or device memory the
  // host can address). False: device kernels do the work, and the pointers are device memory.
  size_t numel() const { return numel_; }
  size_t size_bytes() const { return 4 * numel_ * sizeof(float); }
  // The arrays: pinned CPU or device memory (host-addressable only if host_addressable()).
  float* master() const { return base_; }
  float* exp_avg() const { return base_ + numel_; }
  float* exp_avg_sq() const { return base_ + 2 * numel_; }
  float* grad() const { return base_ + 3 * numel_; }

  // Copies elements [offset, offset + out.size()) of one array to / from host memory, on any
  // tier and device (a device copy waits for itself). InvalidArgument past numel().
  enum class Array { kMaster, kExpAvg, kExpAvgSq, kGrad };
  Status Read(Array array, size_t offset, std::span<float> out) const;
  Status Write(Array array, size_t offset, std::span<const float> in);

  // One optimizer update of elements [g.flat_begin, g.flat_end) at step number `step` (>= 1),
  // with the gradient multiplied by grad_scale first (1 / loss scale, clipping). If param_copy
  // is set, the updated weights are also written to param_copy[flat_begin, flat_end) as
  // copy_dtype (fp16/bf16: fused; fp32: a copy), where param_copy is a partition-sized array in
  // the same memory as the state (host-addressable if host_addressable(), else device memory).
  // With device kernels it returns once the update is done (its stream synchronized).
  Status StepSubGroup(const SubGroup& g, int64_t step, const Hyperparams& hp, float grad_scale,
                      void* param_copy, DType copy_dtype) const;

  // Sum of squares of grad()[begin, end) in double, in a fixed order (chunks of 4096 summed
  // left to right), so every placement of the same partition gives the same bits.
  double GradSquaredNorm(size_t begin, size_t end) const;
  // True if any grad()[begin, end) is Inf or NaN.
  bool GradHasNonFinite(size_t begin, size_t end) const;
  // grad()[0, numel) = 0.
  void ZeroGrad() const;
  // With device kernels the three calls above can fail (a device error): they then return NaN /
  // true / nothing, and the error is kept here and returned by the next StepSubGroup, Read and
  // Write, so it is never lost. Ok on the host paths.
  Status status() const;

 private:
  OptimizerState(const OptimizerStateOptions& options, CpuOptimizer optimizer)
      : options_(options), optimizer_(std::move(optimizer)) {}

  float* ArrayBase(Array array) const;
  Status InitDeviceKernels();
  void Fail(const Status& s) const;

  OptimizerStateOptions options_;
  CpuOptimizer optimizer_;
  Device* device_ = nullptr;
  size_t numel_ = 0;
  float* base_ = nullptr;
  // Device kernels (Tier::kDevice on memory the host cannot address).
  bool device_kernels_ = false;
  Stream stream_;            // the state's own stream on device_
  void* scratch_ = nullptr;  // device: uint32 non-finite flag, then the norm's double partials
  mutable std::vector<double> host_partials_;
  mutable uint32_t host_flag_ = 0;
  mutable std::mutex error_mu_;
  mutable Status error_;
  std::unique_ptr<PinnedPool> pool_;  // kCpu
  PinnedBuffer slab_;                 // kCpu: the one lease of pool_
};

}  // namespace strata
