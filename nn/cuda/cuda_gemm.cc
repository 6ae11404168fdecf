// CUDA GEMM: cublasGemmStridedBatchedEx with fp32 compute (CUBLAS_COMPUTE_32F: fp32
// accumulation, no TF32), on the op's stream.
//   - A and B both fp16 or both bf16: fed to cuBLAS as they are (tensor cores, fp32 accumulate).
//   - Any other mix (the common fp32 activation x 16-bit weight): each 16-bit operand is widened
//     to a dense fp32 scratch copy first (exact), then an fp32 GEMM — the host backend's math.
//   - A 16-bit C (beta == 1, checked by ops.cc): the product goes to fp32 scratch and is added to
//     C in fp32, rounded once (the host's AccumulateFromFloat).
// A matrix stride of 0 (one operand shared by the batch) is kept: it is widened once.
#include "nn/cuda/cuda_context.h"
#include "nn/cuda/cuda_nn_kernels.h"
#include "nn/cuda/cuda_ops.h"

namespace strata::nn::internal::cuda {
namespace {

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// Replaces a 16-bit operand (stored rows x cols, row stride ld, matrix stride stride) by a
// dense fp32 copy in scratch.
Status Widen(const OpStream& s, Scratch& scratch, DType dtype, int64_t batch, int64_t rows,
             int64_t cols, const void*& ptr, int64_t& ld, int64_t& stride) {
  const int64_t count = stride == 0 ? 1 : batch;
  STRATA_ASSIGN_OR_RETURN(float* dst, scratch.Floats(count * rows * cols));
  STRATA_RETURN_IF_ERROR(
      CudaErr(LaunchToFloat(ptr, dtype, count, rows, cols, ld, stride, dst, s.raw()), s.op,
              "widen operand to fp32"));
  ptr = dst;
  ld = cols;
  stride = stride == 0 ? 0 : rows * cols;
  return Status::Ok();
}

}  // namespace

Status CudaGemm(const Stream& stream, const GemmArgs& g) {
  STRATA_ASSIGN_OR_RETURN(OpStream s, Resolve(stream, "gemm"));
  const bool c32 = g.c_dtype == DType::kFloat32;
  if (g.k == 0 && !c32) return Status::Ok();  // C16 += 0

  RowMajorGemm r;
  r.trans_a = g.trans_a, r.trans_b = g.trans_b;
  r.m = g.m, r.n = g.n, r.k = g.k;
  r.a = g.a, r.lda = g.lda, r.stride_a = g.stride_a;
  r.b = g.b, r.ldb = g.ldb, r.stride_b = g.stride_b;
  r.alpha = g.alpha;
  r.batch = g.batch;

  Scratch scratch(s);
  const bool native16 = g.a_dtype == g.b_dtype && g.a_dtype != DType::kFloat32;
  if (native16 || g.k == 0) {
    r.type = CudaType(g.a_dtype);
  } else {
    r.type = CUDA_R_32F;
    if (g.a_dtype != DType::kFloat32) {
      STRATA_RETURN_IF_ERROR(Widen(s, scratch, g.a_dtype, g.batch, g.trans_a ? g.k : g.m,
                                   g.trans_a ? g.m : g.k, r.a, r.lda, r.stride_a));
    }
    if (g.b_dtype != DType::kFloat32) {
      STRATA_RETURN_IF_ERROR(Widen(s, scratch, g.b_dtype, g.batch, g.trans_b ? g.n : g.k,
                                   g.trans_b ? g.k : g.n, r.b, r.ldb, r.stride_b));
    }
  }

  float* tmp = nullptr;
  if (c32) {
    r.c = static_cast<float*>(g.c), r.ldc = g.ldc, r.stride_c = g.stride_c, r.beta = g.beta;
  } else {
    STRATA_ASSIGN_OR_RETURN(tmp, scratch.Floats(g.batch * g.m * g.n));
    r.c = tmp, r.ldc = g.n, r.stride_c = g.m * g.n, r.beta = 0.0f;
  }
  {
    STRATA_ASSIGN_OR_RETURN(BlasLease blas, LeaseBlas(s));
    STRATA_RETURN_IF_ERROR(RunGemm(s, blas.get(), r));
  }
  if (!c32) {
    STRATA_RETURN_IF_ERROR(CudaErr(LaunchAccumulateFromFloat(tmp, g.batch, g.m, g.n, g.c, g.c_dtype,
                                                             g.ldc, g.stride_c, s.raw()),
                                   s.op, "accumulate into 16-bit C"));
  }
  return scratch.Release();
}

}  // namespace strata::nn::internal::cuda
