// Test helper: random optimizer inputs in every dtype, a double-precision shadow of them, and
// per-element error bounds for comparing a kernel's step with ReferenceStep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu_adam/cpu_optimizer.h"
#include "cpu_adam/hyperparams.h"
#include "cpu_adam/simd/dtype.h"

namespace strata::testing {

// Random but well-conditioned optimizer state: p ~ U(-1, 1), grads ~ U(-0.1, 0.1) / grad_scale
// (stored in `grad_dtype`), m ~ U(-0.05, 0.05), v ~ U(0, 0.01) (Adagrad: U(0, 1)).
struct OptimizerProblem {
  OptimizerProblem(OptimizerKind kind, size_t numel, DType grad_dtype, bool with_copy,
                   DType copy_dtype, float grad_scale, uint64_t seed);

  // The StepTensors view of the float arrays (state pointers only where `kind` uses them).
  StepTensors Tensors();
  // Fresh random gradients (same distribution), e.g. before each step.
  void NewGrads(uint64_t seed);
  // Gradients widened to double (exact for every dtype).
  std::vector<double> GradsAsDouble() const;

  OptimizerKind kind;
  size_t numel;
  DType grad_dtype;
  bool with_copy;
  DType copy_dtype;
  float grad_scale;
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<float> grads_f32;
  std::vector<uint16_t> grads_16, copy;
  std::vector<float> copy_f32;  // the copy when copy_dtype is fp32
};

// The same state in double.
struct DoubleState {
  explicit DoubleState(const OptimizerProblem& p);
  std::vector<double> params, exp_avg, exp_avg_sq;
};

// Checks one kernel step against one ReferenceStep taken from the same pre-step state `before`.
// Error bounds are `ulps` float roundings of the magnitudes that enter each result (so
// cancellation is allowed for), and for Lion a flipped sign only where the reference's sign
// argument is within rounding of zero. Also checks the fused copy bit for bit against
// FloatTo{Half,BFloat16}(params), or params themselves for an fp32 copy. Returns "" or a
// description of the first few mismatches.
std::string CompareStep(const DoubleState& before, const std::vector<double>& grads,
                        const Hyperparams& hp, int64_t step, const OptimizerProblem& after,
                        double ulps = 16);

}  // namespace strata::testing
