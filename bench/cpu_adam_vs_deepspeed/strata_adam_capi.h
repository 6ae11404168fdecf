// A C ABI over Strata's CPU Adam and over cpu_adam_roofline's plain Adam loop, so that
// compare.py can run both through ctypes on the same torch tensors as DeepSpeed's CPU Adam.
//
// Both steps are fp32 throughout (params, grads, exp_avg, exp_avg_sq, all `numel` long,
// contiguous and not overlapping), update params and state in place and return 0, or -1 with
// the reason in strata_capi_last_error(). They may be called from any thread, one step at a time
// per set of arrays; the caller keeps ownership of every array.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The hyperparameters of one Adam(W) step, as DeepSpeed's adam_update takes them.
typedef struct StrataAdamArgs {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  int adam_w_mode;      // 1: AdamW (p *= 1 - lr * wd); 0: L2 (g += wd * p)
  int bias_correction;  // 1: divide by 1 - beta^step
  int64_t step;         // >= 1
} StrataAdamArgs;

// One step of strata::CpuOptimizer (OptimizerKind::kAdam, best ISA of this CPU) in its own
// oneTBB arena of `num_threads` threads (created on first use per thread count, then reused).
int strata_adam_step_fp32(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                          size_t numel, const StrataAdamArgs* args, int num_threads);

// The kernel the Strata optimizer for `num_threads` runs ("avx2", ...), or "" on error.
const char* strata_adam_kernel_name(int num_threads);

// One step of the plain loop (bench/cpu_adam_roofline/streams.cc, -O3 -march=native
// -fno-math-errno) split into `num_threads` contiguous chunks over std::threads. AdamW only
// (adam_w_mode must be 1).
int plain_adam_step_fp32(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                         size_t numel, const StrataAdamArgs* args, int num_threads);

// The message of the last failed call on this thread ("" if none).
const char* strata_capi_last_error(void);

#ifdef __cplusplus
}  // extern "C"
#endif
