// CpuOptimizer: Adam/AdamW, Adagrad and Lion steps on the CPU at memory-bandwidth speed.
//
// This is the optimizer half of ZeRO-Offload: fp32 master weights and optimizer state live in
// host memory and every step streams through all of them once. The update runs the best SIMD
// kernel this CPU supports (see simd_isa.h), in parallel with oneTBB over fixed-size tiles, and
// in the same pass can (a) unscale the gradients (grad_scale), (b) read fp16/bf16 gradients and
// (c) write the fp16/bf16 (or fp32) compute copy of the updated weights. A per-tile callback tells
// the caller when a tile is final, so the copy of that tile to the device can start while later
// tiles are still being updated.
//
// Results are identical for any tile size, thread count or arena (each element is computed by the
// same instruction sequence); they differ between ISAs only by rounding (FMA vs separate ops).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "cpu_adam/hyperparams.h"
#include "cpu_adam/simd/dtype.h"
#include "cpu_adam/simd/simd_isa.h"

namespace strata {
namespace internal {
struct KernelTable;
}  // namespace internal

struct CpuOptimizerOptions {
  // kAuto: STRATA_SIMD if set, else the best the CPU supports. An ISA the CPU lacks is an error.
  SimdIsa isa = SimdIsa::kAuto;
  // Elements per tile (the unit of parallel work and of on_tile_done). A multiple of 64, so tiles
  // of fp32 and of fp16/bf16 arrays both end on cache-line boundaries when the arrays are
  // 64-byte aligned (no false sharing between threads). See docs/cpu_adam.md for the choice.
  size_t tile_numel = size_t{1} << 16;
  // 0: run in the caller's oneTBB arena (its concurrency limits apply). N > 0: the optimizer's
  // own arena of N threads.
  int num_threads = 0;
  // Software prefetch distance on each fp32 stream (SIMD kernels only); 0 turns it off.
  size_t prefetch_bytes = 0;
};

// The tensors of one step. All arrays have `numel` elements, are naturally aligned for their
// element type and must not overlap each other. The step reads `grads` and updates `params` and
// the state arrays in place.
struct StepTensors {
  size_t numel = 0;
  float* params = nullptr;  // fp32 master weights
  const void* grads = nullptr;
  DType grad_dtype = DType::kFloat32;
  float* exp_avg = nullptr;     // Adam, Lion: first moment (null for Adagrad)
  float* exp_avg_sq = nullptr;  // Adam: second moment; Adagrad: sum of squares (null for Lion)
  // Optional: receives the updated params rounded to fp16 or bf16 (round to nearest even), or
  // as they are (fp32: a second copy written from the same registers, no pass over params).
  void* param_copy = nullptr;
  DType param_copy_dtype = DType::kBFloat16;
};

// Called once per finished tile with its element range [begin, end), on the worker thread that
// ran it, concurrently with other tiles and in no particular order. Everything in the range
// (params, state, param_copy) is final when it is called. Must not throw and must not fail: a
// caller that can fail records the error itself.
using TileDoneFn = std::function<void(size_t begin, size_t end)>;

struct StepOptions {
  // Gradients are multiplied by this first (e.g. 1 / loss_scale). Finite and > 0.
  float grad_scale = 1.0f;
  TileDoneFn on_tile_done;  // optional
};

class CpuOptimizer {
 public:
  // InvalidArgument for bad options, Unavailable when the requested ISA is not supported here.
  static Result<CpuOptimizer> Create(OptimizerKind kind, const CpuOptimizerOptions& options = {});

  CpuOptimizer(CpuOptimizer&&) noexcept;
  CpuOptimizer& operator=(CpuOptimizer&&) noexcept;
  ~CpuOptimizer();

  OptimizerKind kind() const { return kind_; }
  // The ISA actually used (never kAuto) and the kernel variant's name (e.g. "avx2").
  SimdIsa isa() const { return isa_; }
  const char* kernel_name() const;
  const CpuOptimizerOptions& options() const { return options_; }

  // Parameter groups: each has its own hyperparameters and step counter (starting at 0).
  // Returns the new group's id (0, 1, ...). Not to be called concurrently with Step().
  Result<int> AddGroup(const Hyperparams& hp);
  int num_groups() const { return static_cast<int>(groups_.size()); }
  Status SetHyperparams(int group, const Hyperparams& hp);
  Status SetLearningRate(int group, float lr);  // for LR schedules
  Result<Hyperparams> hyperparams(int group) const;
  Result<int64_t> step_count(int group) const;
  Status SetStepCount(int group, int64_t steps);  // checkpoint restore; >= 0

  // Increments the group's step counter and applies one update with it. On error nothing is
  // modified (arguments are checked before any element is touched). Steps on different groups
  // may run concurrently from different threads.
  Status Step(int group, const StepTensors& t, const StepOptions& options = {});

  // Applies one update at an explicit step number (>= 1) with explicit hyperparameters, touching
  // no counter. Thread-safe.
  Status StepAt(const Hyperparams& hp, int64_t step, const StepTensors& t,
                const StepOptions& options = {}) const;

 private:
  struct Group {
    Hyperparams hp;
    int64_t steps = 0;
  };
  struct Arena;
  CpuOptimizer(OptimizerKind kind, const CpuOptimizerOptions& options, SimdIsa isa,
               const internal::KernelTable* table);
  Status CheckGroup(int group) const;

  OptimizerKind kind_;
  CpuOptimizerOptions options_;
  SimdIsa isa_;
  const internal::KernelTable* table_;
  std::unique_ptr<Arena> arena_;
  std::vector<Group> groups_;
};

}  // namespace strata
