#include "cpu_adam/simd/simd_isa.h"

#include <cstdlib>
#include <string>

namespace strata {
namespace {

struct CpuFeatures {
  bool avx2_fma_f16c = false;
  bool avx512f = false;
  bool avx512bf16 = false;
};

// __builtin_cpu_supports consults cpuid and, for AVX/AVX-512, the OS's XCR0 mask (so a kernel that
// does not save ZMM state reports no AVX-512).
CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2_fma_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  f.avx512f = f.avx2_fma_f16c && __builtin_cpu_supports("avx512f");
  f.avx512bf16 = f.avx512f && __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

const CpuFeatures& Features() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace

std::string_view SimdIsaName(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kAuto:
      return "auto";
    case SimdIsa::kScalar:
      return "scalar";
    case SimdIsa::kAvx2:
      return "avx2";
    case SimdIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

Result<SimdIsa> ParseSimdIsa(std::string_view name) {
  for (SimdIsa isa : {SimdIsa::kAuto, SimdIsa::kScalar, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (name == SimdIsaName(isa)) return isa;
  }
  return InvalidArgumentError("unknown SIMD ISA '" + std::string(name) +
                              "' (allowed: auto, scalar, avx2, avx512)");
}

bool CpuSupports(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kAuto:
    case SimdIsa::kScalar:
      return true;
    case SimdIsa::kAvx2:
      return Features().avx2_fma_f16c;
    case SimdIsa::kAvx512:
      return Features().avx512f;
  }
  return false;
}

bool CpuHasAvx512Bf16() { return Features().avx512bf16; }

SimdIsa BestSupportedIsa() {
  if (CpuSupports(SimdIsa::kAvx512)) return SimdIsa::kAvx512;
  if (CpuSupports(SimdIsa::kAvx2)) return SimdIsa::kAvx2;
  return SimdIsa::kScalar;
}

std::string CpuSimdFeatures() {
  const CpuFeatures& f = Features();
  std::string s = f.avx2_fma_f16c ? "avx2 fma f16c" : "no avx2/fma/f16c";
  s += f.avx512f ? " avx512f" : " no-avx512";
  if (f.avx512bf16) s += " avx512bf16";
  return s;
}

Result<SimdIsa> ResolveSimdIsa(SimdIsa requested) {
  SimdIsa isa = requested;
  std::string origin = "requested";
  if (isa == SimdIsa::kAuto) {
    const char* env = std::getenv("STRATA_SIMD");
    if (env != nullptr && *env != '\0') {
      Result<SimdIsa> parsed = ParseSimdIsa(env);
      if (!parsed.ok()) return parsed.status().WithContext("environment STRATA_SIMD");
      isa = *parsed;
      origin = "STRATA_SIMD";
    }
    if (isa == SimdIsa::kAuto) return BestSupportedIsa();
  }
  if (!CpuSupports(isa)) {
    return UnavailableError(origin + " SIMD ISA " + std::string(SimdIsaName(isa)) +
                            " is not supported by this CPU (it has: " + CpuSimdFeatures() +
                            "; allowed here: scalar" +
                            (CpuSupports(SimdIsa::kAvx2) ? ", avx2" : "") + ")");
  }
  return isa;
}

}  // namespace strata
