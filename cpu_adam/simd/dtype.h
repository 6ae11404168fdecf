// Element types the CPU optimizers read and write. Master weights and optimizer state are always
// fp32; gradients may arrive as fp32, fp16 or bf16, and the optimizer can write a half-precision
// copy of the updated weights (the compute copy that goes back to the device). The type and its
// scalar conversions are shared by every layer: core/dtype.h and core/half.h.
#pragma once

#include "core/dtype.h"
#include "core/half.h"
