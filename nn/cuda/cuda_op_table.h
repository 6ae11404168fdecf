// The CUDA backend of the nn op set: the OpTable registered for DeviceKind::kCuda by
// nn/ops/op_registry.cc (the one place that knows whether CUDA is built). CUDA-free header.
//
// Every op is enqueued on the op's stream (its cudaStream_t, from CudaNativeStreamOf): GEMMs in
// cuBLAS with fp32 compute, everything else in the kernels of nn/cuda/*.cu. The host backend
// (nn/host/) is the reference for the math and the argument meanings; tests/nn/
// op_conformance_test.cc runs both on the same inputs. Op timing (SetOpTiming) is not recorded
// by this backend: it would need an event pair per op.
#pragma once

#include "nn/ops/op_registry.h"

namespace strata::nn::internal {

const OpTable& CudaOpTable();

}  // namespace strata::nn::internal
