// What every CUDA nn op needs around its kernels (internal to nn/cuda): the op's cudaStream_t,
// the one seam where cudaError_t / cublasStatus_t become Status, a cuBLAS handle bound to the
// stream, stream-ordered scratch memory, and the index check that turns a bad token id, position
// or label found on the GPU into the stream's error with the host backend's message.
//
// Note [CUDA op errors]
// Arguments were checked by nn/ops/ops.cc. A failed launch or cuBLAS call returns its error at once
// from the op (nothing was enqueued after it). Indices live in device memory, so they are checked
// on the GPU: a one-block kernel finds the first bad one and writes it to a slot of mapped pinned
// memory; a host function enqueued after the op reads the slot and, if it holds one, fails the
// stream with InvalidArgument (Note [Stream errors], offload/device/api/device.h). The op's own
// kernels skip bad rows, so nothing reads out of bounds.
//
// Note [CUDA op scratch]
// Temporaries (fp32 copies of 16-bit GEMM operands, RMSNorm's dw partials) come from the stream's
// Device (Allocate, so the device cap and statistics see them) and are released with FreeAsync
// on the op's stream: stream-ordered, like PyTorch's caching allocator, no synchronisation. The
// CUDA pool (cudaMallocAsync) makes the repeat cost small; a per-stream arena would remove it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "core/status.h"
#include "offload/device/api/device.h"

namespace strata::nn::internal::cuda {

// The seam: cudaError_t (as int, from the kernel launchers) and cublasStatus_t to Status.
Status CudaErr(int err, const char* op, const char* what);
Status BlasErr(cublasStatus_t status, const char* op, const char* what);

// The op's stream as CUDA sees it; the GPU is current on the calling thread once Resolve returns.
struct OpStream {
  Stream stream;
  cudaStream_t cuda = nullptr;
  int ordinal = 0;
  const char* op = "";  // for error messages
  void* raw() const { return static_cast<void*>(cuda); }
};
Result<OpStream> Resolve(const Stream& stream, const char* op);

// A cuBLAS handle used by one stream at a time (Note [cuBLAS handles], cuda_context.cc), held
// exclusively while the lease lives, with its stream set to the op's.
class BlasLease {
 public:
  BlasLease(cublasHandle_t handle, std::unique_lock<std::mutex> lock)
      : handle_(handle), lock_(std::move(lock)) {}
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_;
  std::unique_lock<std::mutex> lock_;
};
Result<BlasLease> LeaseBlas(const OpStream& s);

// Stream-ordered scratch (Note [CUDA op scratch]): Get allocates; Release (or the destructor,
// best effort) frees every block in the op's stream order.
class Scratch {
 public:
  explicit Scratch(const OpStream& s) : s_(s) {}
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Result<float*> Floats(int64_t count);
  Status Release();

 private:
  static constexpr int kMaxBlocks = 4;
  OpStream s_;
  void* blocks_[kMaxBlocks] = {};
  int used_ = 0;
};

// What an index check reports, and how (Note [CUDA op errors]).
enum class IndexKind : uint8_t {
  kTokenId,   // "<op>: token id V at position I is outside [0, limit)"
  kPosition,  // "rope: position V of token I is outside [0, limit)"
  kLabel,     // "cross_entropy: label V at position I is outside [0, limit) and is not -100"
};
// Enqueues the check of idx[0, n) on the op's stream behind the work already there (call it
// after the op's kernels, so its host function does not stall them).
Status EnqueueIndexCheck(const OpStream& s, const int32_t* idx, int64_t n, int64_t limit,
                         IndexKind kind);

// Row-major C = alpha op(A) op(B) + beta C on fp32 compute (CUBLAS_COMPUTE_32F, no TF32),
// strided-batched; `type` of A and B is CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF (the same for both),
// C is fp32. Leading dimensions and strides in elements, as GemmArgs.
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t type = CUDA_R_32F;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t batch = 1;
};
Status RunGemm(const OpStream& s, cublasHandle_t handle, const RowMajorGemm& g);

}  // namespace strata::nn::internal::cuda
