// cuBLAS, loaded at run time: the entry points the CUDA backends use (nn/cuda's GEMMs and
// attention), resolved with dlopen/dlsym the first time a CudaDevice is created.
//
// Note [cuBLAS loaded on demand]
// Linking libcublas (and with it libcublasLt) costs every process that links the CUDA backend
// about 0.3 CPU s of static initialisers at start-up, GPU or not: every test binary and every
// `strata` call of a CUDA build, on machines that mostly have no GPU. So nothing links it:
// CreateCudaDevice loads it (LoadCublas) before it hands out a device, so a missing or broken
// library is an Unavailable error naming it at device creation, never a failure in the middle of
// a step; the nn ops reach the functions through Cublas(). Internal to the CUDA backends (this
// header includes cublas_v2.h for the types only: no symbol of libcublas is referenced).
#pragma once

#include <cublas_v2.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace strata::internal {

// The cuBLAS functions Strata calls, with the types of the names cublas_v2.h gives them.
struct CublasApi {
  using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
  using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  // (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
  //  beta, C, Ctype, ldc, strideC, batchCount, computeType, algo)
  using GemmStridedBatchedExFn = cublasStatus_t (*)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
      cudaDataType, int, long long, const void*, cudaDataType, int, long long, const void*, void*,
      cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  using StatusTextFn = const char* (*)(cublasStatus_t);

  CreateFn create = nullptr;                              // cublasCreate (cublasCreate_v2)
  SetStreamFn set_stream = nullptr;                       // cublasSetStream (cublasSetStream_v2)
  GemmStridedBatchedExFn gemm_strided_batched = nullptr;  // cublasGemmStridedBatchedEx
  StatusTextFn status_name = nullptr;                     // cublasGetStatusName
  StatusTextFn status_string = nullptr;                   // cublasGetStatusString
};

// The library file names tried in order: the soname of the toolkit Strata was built with (found
// through the usual search: LD_LIBRARY_PATH, the binary's run path, ld.so.cache), then the same
// file in that toolkit's library directory.
std::vector<std::string> CublasLibraryCandidates();

// Opens the first of `candidates` that loads and resolves every entry point (not cached; the
// handle is never closed). Unavailable naming each file tried and the loader's reason when none
// does, or naming the missing function when a file loads without it.
Result<CublasApi> OpenCublas(const std::vector<std::string>& candidates);

// OpenCublas(CublasLibraryCandidates()) once per process, thread-safe; later calls return the
// same table or the same error.
Result<const CublasApi*> LoadCublas();

// The table loaded by a successful LoadCublas() (every CUDA stream belongs to a CudaDevice, whose
// creation loaded it); aborts if cuBLAS was never loaded (a broken invariant).
const CublasApi& Cublas();

}  // namespace strata::internal
