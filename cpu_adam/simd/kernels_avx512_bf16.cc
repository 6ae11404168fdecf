// The AVX-512 kernels again, with native bf16 narrowing (AVX512_BF16). See kernels_avx512.cc.
#define STRATA_KERNELS_AVX512_BF16 1
#include "cpu_adam/simd/kernels_avx512.cc"  // NOLINT(build/include): same kernels, other flags
