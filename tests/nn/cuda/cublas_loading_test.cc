// cuBLAS is loaded when a CudaDevice is created, not at start-up (Note [cuBLAS loaded on demand],
// offload/device/cuda/cublas_library.h). The loader needs only the library, not a GPU, so it runs
// here; this binary links strata_nn with its CUDA ops, as every test and `strata` do.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "nn/ops/op_registry.h"
#include "offload/device/cuda/cublas_library.h"
#include "offload/device/registry.h"
#include "tests/support/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The objects mapped into this process whose file name contains "libcublas" (libcublas and
// libcublasLt), from the dynamic loader's own list.
std::vector<std::string> LoadedCublasObjects() {
  std::vector<std::string> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (name.find("libcublas") != std::string::npos) {
          static_cast<std::vector<std::string>*>(out)->push_back(name);
        }
        return 0;
      },
      &found);
  return found;
}

// Exits 0 when no cuBLAS object is loaded, else prints them and exits 1.
[[noreturn]] void ExitWithCublasState() {
  const std::vector<std::string> loaded = LoadedCublasObjects();
  for (const std::string& name : loaded) std::fprintf(stderr, "loaded: %s\n", name.c_str());
  std::exit(loaded.empty() ? 0 : 1);
}

TEST(CublasLoadingTest, AProcessStartsWithoutCublas) {
  // A re-executed child: nothing has run in it but start-up and this test.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_NE(nn::OpTableFor(DeviceKind::kCuda), nullptr) << "this binary has the CUDA ops";
  EXPECT_EXIT(ExitWithCublasState(), ::testing::ExitedWithCode(0), "");
}

// Creates a CUDA device and exits 0 when cuBLAS is loaded exactly if that worked.
[[noreturn]] void CreateCudaDeviceAndExit() {
  DeviceOptions options;
  options.kind = DeviceKind::kCuda;
  Result<std::unique_ptr<Device>> device = CreateDevice(options);
  if (device.ok()) std::exit(LoadedCublasObjects().empty() ? 2 : 0);  // a GPU: creation loaded it
  // No GPU (this machine): refused before cuBLAS is needed, so nothing was loaded.
  if (device.status().code() != StatusCode::kUnavailable) std::exit(3);
  ExitWithCublasState();
}

TEST(CublasLoadingTest, OnlyACreatedCudaDeviceLoadsIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(CreateCudaDeviceAndExit(), ::testing::ExitedWithCode(0), "");
}

TEST(CublasLoadingTest, LoadResolvesEveryFunctionAndTheyRun) {
  Result<const internal::CublasApi*> api = internal::LoadCublas();
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  const internal::CublasApi& blas = **api;
  EXPECT_NE(blas.create, nullptr);
  EXPECT_NE(blas.set_stream, nullptr);
  EXPECT_NE(blas.gemm_strided_batched, nullptr);
  // Calls into the library that need no GPU: the names cublas_api.h gives the codes.
  EXPECT_STREQ(blas.status_name(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(blas.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_NE(std::string(blas.status_string(CUBLAS_STATUS_ALLOC_FAILED)), "");
  EXPECT_THAT(LoadedCublasObjects(), ::testing::Not(::testing::IsEmpty()));
  // Loaded once: a second call returns the same table.
  Result<const internal::CublasApi*> again = internal::LoadCublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *api);
}

TEST(CublasLoadingTest, AMissingLibraryIsUnavailableNamingEveryFileTried) {
  Result<internal::CublasApi> api =
      internal::OpenCublas({"libcublas_strata_missing.so.99", "/nonexistent/libcublas.so.99"});
  EXPECT_THAT(api, StatusIs(StatusCode::kUnavailable,
                            AllOf(HasSubstr("cuBLAS"), HasSubstr("libcublas_strata_missing.so.99"),
                                  HasSubstr("/nonexistent/libcublas.so.99"),
                                  HasSubstr("LD_LIBRARY_PATH"))));
}

TEST(CublasLoadingTest, ALibraryWithoutItsFunctionsIsRefusedNamingTheFunction) {
  Result<internal::CublasApi> api = internal::OpenCublas({"libm.so.6"});
  EXPECT_THAT(api, StatusIs(StatusCode::kUnavailable,
                            AllOf(HasSubstr("libm.so.6"), HasSubstr("cublasCreate_v2"))));
}

TEST(CublasLoadingTest, CandidatesAreTheSonameThenTheToolkitFile) {
  const std::vector<std::string> files = internal::CublasLibraryCandidates();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_THAT(files[0], ::testing::StartsWith("libcublas.so."));
  EXPECT_THAT(files[1], ::testing::EndsWith("/" + files[0]));
}

}  // namespace
}  // namespace strata
