// The small kernel set the engine needs on any device: casts, scale, add, fill, an Inf/NaN check
// and L2-norm partial sums. Each call enqueues one kernel on `stream` and returns at once.
//
// All pointers are device memory of the stream's device, aligned to their element size; numel 0
// is a no-op. Arithmetic is done in fp32 and rounded once to the destination type with
// round-to-nearest-even (fp16 overflow -> Inf; NaN stays NaN, Inf stays Inf). Results are the
// same on every run of a given device; HostDevice and CudaDevice may differ in the last bit
// (fused multiply-add, summation order). Argument errors come back at once (InvalidArgument);
// execution errors as described in Note [Stream errors] (device.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "offload/device/api/kernel_launch.h"
#include "offload/device/api/stream.h"

namespace strata {

// Argument order, the same for every launch (as in CopyAsync and memcpy): the stream, then the
// output (pointer, then its dtype or count), then the inputs (each pointer followed by its own
// dtype when it has one), then scalars, then numel.

// dst[i] = src[i] converted from src_dtype to dst_dtype (any pair; same type = copy).
// src and dst must not overlap unless they are the same buffer and dtypes have equal size.
Status LaunchCast(const Stream& stream, void* dst, DType dst_dtype, const void* src,
                  DType src_dtype, size_t numel);

// dst[i] = alpha * src[i], both of `dtype`; dst may equal src (in place).
Status LaunchScale(const Stream& stream, void* dst, DType dtype, const void* src, float alpha,
                   size_t numel);

// dst[i] = a[i] + alpha * b[i]. dst and a share `dtype` (dst may equal a: accumulate in place);
// b may have another type (e.g. fp32 accumulator += bf16 gradient).
Status LaunchAdd(const Stream& stream, void* dst, DType dtype, const void* a, const void* b,
                 DType b_dtype, float alpha, size_t numel);

// dst[i] = value rounded to `dtype`.
Status LaunchFill(const Stream& stream, void* dst, DType dtype, float value, size_t numel);

// Sets *flag = 1 if any src[i] is Inf or NaN; never writes 0, so one flag gathers the check over
// many tensors (clear it with a 4-byte H2D copy of 0). `flag` is a uint32_t in device memory.
Status LaunchCheckFinite(const Stream& stream, uint32_t* flag, const void* src, DType dtype,
                         size_t numel);

// partials[p] = sum of src[i]^2 (as fp32) over chunk p of L2ChunkNumel(numel, num_partials)
// elements (kernel_launch.h). The global norm is sqrt of the sum of all partials (summed by the
// caller, in double, after a D2H copy). `partials` holds num_partials floats in device memory.
Status LaunchL2NormPartials(const Stream& stream, float* partials, size_t num_partials,
                            const void* src, DType dtype, size_t numel);

// Checks the parts of a launch every backend requires (non-null, aligned, sane op/dtypes).
Status ValidateKernelLaunch(const KernelLaunch& launch);

}  // namespace strata
