// The plain double-precision optimizer step: the oracle the SIMD kernels are tested against.
//
// Kept deliberately simple (one loop, no tiling, no SIMD) and written from the textbook rules
// (PyTorch's Adam/AdamW, Adagrad with lr_decay 0, Lion), not from the kernels. Gradients are
// passed already widened to double and are multiplied by grad_scale here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_adam/hyperparams.h"

namespace strata {

// One update at step number `step` (1-based) of `numel` elements in double precision.
// exp_avg is used by Adam and Lion, exp_avg_sq by Adam and Adagrad; the other may be null.
void ReferenceStep(OptimizerKind kind, const Hyperparams& hp, int64_t step, double grad_scale,
                   const double* grads, double* params, double* exp_avg, double* exp_avg_sq,
                   size_t numel);

}  // namespace strata
