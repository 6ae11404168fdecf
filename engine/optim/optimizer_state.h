// OptimizerState: the fp32 half of mixed-precision training for one rank's flat partition
// (engine/base/partition.h) — master weights, the optimizer's moments and the fp32 gradient
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
// Partial offload (offload_optimizer.ratio < 1, engine/optim/partial_offload.h): Tier::kCpu with
// device_numel > 0 splits the partition at a sub-group boundary. Elements [0, device_numel) live
// in device memory and step there (host loops or device kernels, as Tier::kDevice), elements
// [device_numel, numel) in the pinned slab. Every call below takes flat indices of the whole
// partition and dispatches by range; a sub-group must not straddle the split. The device part's
// gradient may be the caller's device array (the engine's fp32 gradient partition), so the
// reduced gradients of the device sub-groups never cross the link.
//
// Same math: the step equals CpuOptimizer's (bitwise on the host backend, to FMA rounding on
// CUDA), and the squared norm has the same bits on every tier and device (Note [Squared-norm
// order] in offload/device/optim/optimizer_kernel_args.h).
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
#include "engine/base/partition.h"
#include "offload/device/api/device.h"
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
  // kCpu only: elements [0, device_numel) in device memory (partial offload; 0 = none).
  size_t device_numel = 0;
  // kCpu with device_numel > 0: the device part's gradient, device memory of at least
  // device_numel floats owned by the caller (outlives the state); null = allocate it here.
  float* device_grad = nullptr;
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
  // True if the arrays below may be dereferenced by the host (the cpu tier, or device memory the
  // host can address). False: device kernels do the work and the pointers are device memory, or
  // the state is split (partial offload) and has no whole arrays: use Read/Write.
  bool host_addressable() const { return !split() && !parts_[0].device_kernels; }
  size_t numel() const { return numel_; }
  size_t size_bytes() const { return 4 * numel_ * sizeof(float); }
  // Partial offload: [0, device_numel()) is in device memory, the rest pinned (0 if not split).
  size_t device_numel() const { return split() ? parts_[0].end : 0; }
  bool split() const { return parts_.size() > 1; }
  // Bytes this state holds per tier (a caller-owned device gradient is not counted).
  uint64_t device_bytes() const { return device_bytes_; }
  uint64_t cpu_bytes() const { return cpu_bytes_; }
  // The whole arrays (one part: pinned CPU or device memory, host-addressable only if
  // host_addressable()); null when split().
  float* master() const { return whole(0); }
  float* exp_avg() const { return whole(1); }
  float* exp_avg_sq() const { return whole(2); }
  float* grad() const { return whole(3); }
  // The gradient elements [device_numel(), numel) in host memory (Tier::kCpu): where the engine
  // copies the reduced gradients of the CPU sub-groups. grad() when not split; null for kDevice.
  float* host_grad() const;

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
  // grad()[0, numel) = 0; without `host_parts` only the device part (the gradient reducer
  // overwrites host_grad(): Note [Copy first] in engine/zero/grad/grad_reducer.cc).
  void ZeroGrad(bool host_parts = true) const;
  // With device kernels the three calls above can fail (a device error): they then return NaN /
  // true / nothing, and the error is kept here and returned by the next StepSubGroup, Read and
  // Write, so it is never lost. Ok on the host paths.
  Status status() const;

 private:
  // A contiguous run [begin, end) of the partition on one tier: master, exp_avg and exp_avg_sq
  // at base (end - begin elements each), the gradient at grad.
  struct Part {
    size_t begin = 0, end = 0;
    float* base = nullptr;
    float* grad = nullptr;
    bool on_device = false;
    bool device_kernels = false;  // device memory the host cannot address
    size_t numel() const { return end - begin; }
    float* At(Array array, size_t flat) const;
  };

  OptimizerState(const OptimizerStateOptions& options, CpuOptimizer optimizer)
      : options_(options), optimizer_(std::move(optimizer)) {}

  float* whole(int array) const;
  Status AllocateDevicePart(Part* part, float* external_grad);
  Status AllocatePinnedPart(Part* part, TierBudget* budget);
  Status InitDeviceKernels(size_t max_device_numel);
  Status Copy(const Part& part, void* dst, const void* src, size_t bytes, CopyKind kind) const;
  // Note [Squared-norm order] across parts: adds the squares of grad[lo, hi) of `part` to the
  // open chunk (*chunk_sum, ending at *chunk_end) and closes finished chunks into *total.
  Status AddSquares(const Part& part, size_t lo, size_t hi, double* total, double* chunk_sum,
                    size_t* chunk_end) const;
  void Fail(const Status& s) const;

  OptimizerStateOptions options_;
  CpuOptimizer optimizer_;
  Device* device_ = nullptr;
  size_t numel_ = 0;
  std::vector<Part> parts_;  // in flat order: the device part first
  void* device_alloc_ = nullptr;
  uint64_t device_bytes_ = 0, cpu_bytes_ = 0;
  // Device kernels (a device part on memory the host cannot address).
  Stream stream_;            // the state's own stream on device_
  void* scratch_ = nullptr;  // device: uint32 non-finite flag, then the norm's double partials
  mutable std::vector<double> host_partials_;
  mutable std::vector<double> host_norm_sums_;  // GradSquaredNorm: whole host chunks
  mutable uint32_t host_flag_ = 0;
  mutable std::mutex error_mu_;
  mutable Status error_;
  std::unique_ptr<PinnedPool> pool_;  // kCpu
  PinnedBuffer slab_;                 // kCpu: the one lease of pool_
};

}  // namespace strata
