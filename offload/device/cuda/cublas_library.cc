// cuBLAS loaded with dlopen when a CudaDevice is created (Note [cuBLAS loaded on demand]).
#include "offload/device/cuda/cublas_library.h"

#include <dlfcn.h>

#include <type_traits>
#include <utility>

namespace strata::internal {
namespace {

// The pointer types must fit what cublas_v2.h declares (checked unevaluated: no symbol of
// libcublas is referenced, so nothing links it). cublasGemmStridedBatchedEx is overloaded by an
// inline wrapper taking a cudaDataType compute type; the cast picks the library's own.
static_assert(std::is_same_v<decltype(&cublasCreate), CublasApi::CreateFn>);
static_assert(std::is_same_v<decltype(&cublasSetStream), CublasApi::SetStreamFn>);
static_assert(std::is_same_v<
              decltype(static_cast<CublasApi::GemmStridedBatchedExFn>(&cublasGemmStridedBatchedEx)),
              CublasApi::GemmStridedBatchedExFn>);
static_assert(std::is_same_v<decltype(&cublasGetStatusName), CublasApi::StatusTextFn>);
static_assert(std::is_same_v<decltype(&cublasGetStatusString), CublasApi::StatusTextFn>);

// Resolves `name` in `lib` into `*fn`; false when the library lacks it.
template <typename Fn>
bool ResolveSymbol(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return *fn != nullptr;
}

}  // namespace

std::vector<std::string> CublasLibraryCandidates() {
  return {STRATA_CUBLAS_SONAME, STRATA_CUBLAS_PATH};
}

Result<CublasApi> OpenCublas(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& file : candidates) {
    // RTLD_LOCAL: cuBLAS's symbols stay out of the global namespace; RTLD_NOW: a broken install
    // fails here, not at the first GEMM.
    void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + file + ": " + (why != nullptr ? why : "dlopen failed");
      continue;
    }
    CublasApi api;
    // The _v2 names are what cublas_v2.h maps cublasCreate and cublasSetStream to.
    const std::pair<const char*, bool> symbols[] = {
        {"cublasCreate_v2", ResolveSymbol(lib, "cublasCreate_v2", &api.create)},
        {"cublasSetStream_v2", ResolveSymbol(lib, "cublasSetStream_v2", &api.set_stream)},
        {"cublasGemmStridedBatchedEx",
         ResolveSymbol(lib, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched)},
        {"cublasGetStatusName", ResolveSymbol(lib, "cublasGetStatusName", &api.status_name)},
        {"cublasGetStatusString", ResolveSymbol(lib, "cublasGetStatusString", &api.status_string)},
    };
    for (const auto& [name, found] : symbols) {
      if (!found) {
        dlclose(lib);
        return UnavailableError("cuBLAS: " + file + " has no function " + name +
                                " (is it the cuBLAS of CUDA " STRATA_CUDA_VERSION
                                " that Strata was built with?)");
      }
    }
    return api;  // the library stays loaded for the life of the process
  }
  return UnavailableError(
      "cuBLAS (" STRATA_CUBLAS_SONAME
      ", the CUDA backend's GEMMs and attention) could not be loaded; install the cuBLAS of "
      "CUDA " STRATA_CUDA_VERSION " or add its directory to LD_LIBRARY_PATH. Tried:" +
      tried);
}

Result<const CublasApi*> LoadCublas() {
  static const Result<CublasApi>* const loaded =
      new Result<CublasApi>(OpenCublas(CublasLibraryCandidates()));  // never destroyed
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

const CublasApi& Cublas() {
  Result<const CublasApi*> api = LoadCublas();
  STRATA_CHECK_MSG(api.ok(), "cuBLAS used before a CudaDevice loaded it");
  return **api;
}

}  // namespace strata::internal
