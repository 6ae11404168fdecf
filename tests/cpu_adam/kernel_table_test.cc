// The per-ISA kernel tables: one entry per (gradient dtype, fused parameter copy), and the copy
// enum named apart from the device layer's CopyKind, so both can be in scope at once.
#include "cpu_adam/simd/kernel_table.h"

#include <gtest/gtest.h>

#include <type_traits>

#include "offload/device/api/stream.h"

namespace strata {
namespace {

TEST(CpuAdamKernelTableTest, CopyKindMeansOnlyTheDeviceCopy) {
  using namespace internal;  // NOLINT: what a kernel file does; must not make CopyKind ambiguous
  // With two enums called CopyKind (one here, one in the device layer) this line did not compile.
  EXPECT_TRUE((std::is_same_v<CopyKind, ::strata::CopyKind>));
  EXPECT_EQ(4, kNumParamCopies);
  EXPECT_EQ(3, static_cast<int>(ParamCopy::kFloat32));
  EXPECT_EQ(2, static_cast<int>(ParamCopy::kBFloat16));
}

TEST(CpuAdamKernelTableTest, ScalarTableHasEveryGradientAndCopyType) {
  const internal::KernelTable& t = internal::ScalarKernels();
  for (int g = 0; g < internal::kNumGradKinds; ++g) {
    for (int c = 0; c < internal::kNumParamCopies; ++c) {
      EXPECT_NE(nullptr, t.adam[g][c]) << "grad " << g << " copy " << c;
      EXPECT_NE(nullptr, t.adagrad[g][c]) << "grad " << g << " copy " << c;
      EXPECT_NE(nullptr, t.lion[g][c]) << "grad " << g << " copy " << c;
    }
  }
}

}  // namespace
}  // namespace strata
