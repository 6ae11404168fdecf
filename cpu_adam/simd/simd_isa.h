// Which SIMD instruction set the CPU optimizer kernels run with, detected at run time.
//
// The library is compiled for baseline x86-64; only the per-ISA kernel files are compiled with
// AVX2/AVX-512 flags, and they are only called after cpuid (and the OS's saved-state mask) says
// the instructions are usable. STRATA_SIMD=scalar|avx2|avx512 in the environment overrides the
// automatic choice (tests use SimdIsa values directly to exercise every supported path).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata {

enum class SimdIsa {
  kAuto,    // STRATA_SIMD if set, else the best the CPU supports
  kScalar,  // portable C++, any CPU
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512F (+ AVX512_BF16 conversions when the CPU has them)
};

// "auto", "scalar", "avx2", "avx512".
std::string_view SimdIsaName(SimdIsa isa);
// Parses the names above; InvalidArgument names the allowed values.
Result<SimdIsa> ParseSimdIsa(std::string_view name);

// What this CPU (and OS) can run. Thread-safe; detected once.
bool CpuSupports(SimdIsa isa);
// True when the CPU has AVX512_BF16 (native fp32 -> bf16 conversion) in addition to AVX-512F.
bool CpuHasAvx512Bf16();
// The best supported ISA: avx512 > avx2 > scalar.
SimdIsa BestSupportedIsa();
// e.g. "avx2 fma f16c" — the flags relevant to the kernels, for reports.
std::string CpuSimdFeatures();

// Resolves kAuto (STRATA_SIMD, else BestSupportedIsa()) and checks that the result is supported:
// Unavailable when the CPU lacks it, InvalidArgument when STRATA_SIMD holds an unknown name.
Result<SimdIsa> ResolveSimdIsa(SimdIsa requested);

}  // namespace strata
