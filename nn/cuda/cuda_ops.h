// The CUDA ops that are more than one kernel (internal to nn/cuda; CUDA-free): GEMM on cuBLAS
// (cuda_gemm.cc) and causal GQA attention built from batched cuBLAS GEMMs and the softmax
// kernels (cuda_attention.cc). Arguments were checked by nn/ops/ops.cc.
#pragma once

#include "nn/ops/ops.h"

namespace strata::nn::internal::cuda {

Status CudaGemm(const Stream& stream, const GemmArgs& args);
Status CudaAttentionForward(const Stream& stream, const AttentionArgs& args);
Status CudaAttentionBackward(const Stream& stream, const AttentionArgs& args);

}  // namespace strata::nn::internal::cuda
