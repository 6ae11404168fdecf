// Host (CPU) implementations of the device kernel set, for HostDevice.
//
// Two instruction-set paths over the same contract: AVX2+F16C (chosen at run time when the CPU
// has it) and a portable scalar path, which is also the oracle for tails. Large launches are
// split into fixed 64K-element blocks run with oneTBB, so one kernel can use every core, and
// results do not depend on the number of threads (reductions use a fixed block tree).
#pragma once

#include <cstddef>

#include "core/status.h"
#include "offload/device/api/kernel_launch.h"

namespace strata::internal {

enum class HostKernelIsa { kScalar, kAvx2 };

// The best path this CPU supports.
HostKernelIsa DetectHostKernelIsa();
const char* HostKernelIsaName(HostKernelIsa isa);

// Runs `launch` to completion on the calling thread (plus oneTBB workers). The launch must have
// passed ValidateKernelLaunch. Never fails for a valid launch.
Status RunHostKernel(const KernelLaunch& launch, HostKernelIsa isa);
inline Status RunHostKernel(const KernelLaunch& launch) {
  static const HostKernelIsa isa = DetectHostKernelIsa();
  return RunHostKernel(launch, isa);
}

// Per-path building blocks over elements [begin, begin + n). The AVX2 versions require n to be a
// multiple of 8 and are defined in host_kernels_avx2.cc (compiled with -mavx2 -mfma -mf16c).
struct HostKernelPath {
  void (*cast)(const KernelLaunch& k, size_t begin, size_t n);
  void (*scale)(const KernelLaunch& k, size_t begin, size_t n);
  void (*add)(const KernelLaunch& k, size_t begin, size_t n);
  void (*fill)(const KernelLaunch& k, size_t begin, size_t n);
  bool (*any_non_finite)(const KernelLaunch& k, size_t begin, size_t n);
  double (*sum_squares)(const KernelLaunch& k, size_t begin, size_t n);
};
extern const HostKernelPath kScalarKernelPath;
extern const HostKernelPath kAvx2KernelPath;

}  // namespace strata::internal
