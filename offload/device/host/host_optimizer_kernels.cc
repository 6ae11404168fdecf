// The host backend of the device optimizer kernels (optimizer_kernels.h): HostDevice memory is
// host RAM, so the step is cpu_adam's own SIMD step (CpuOptimizer::StepAt, the best ISA here) and
// the squared norm is the plain loop of Note [Squared-norm order], both run as a host task on the
// stream's worker. Each launch copies its arguments into one heap block owned by the task
// (HostTask captures are capped at 48 bytes); one small allocation per step is noise next to it.

#include <cstring>
#include <memory>

#include "cpu_adam/cpu_optimizer.h"
#include "offload/device/optim/optimizer_kernels.h"

namespace strata::internal {
namespace {

Status RunStep(const OptimizerStepLaunch& l) {
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer opt, CpuOptimizer::Create(l.kind));
  StepTensors t;
  t.numel = l.numel;
  t.params = l.params;
  t.grads = l.grads;
  t.grad_dtype = DType::kFloat32;
  t.exp_avg = l.kind == OptimizerKind::kAdagrad ? nullptr : l.exp_avg;
  t.exp_avg_sq = l.kind == OptimizerKind::kLion ? nullptr : l.exp_avg_sq;
  const bool fused = l.param_copy != nullptr && l.param_copy_dtype != DType::kFloat32;
  if (fused) {
    t.param_copy = l.param_copy;
    t.param_copy_dtype = l.param_copy_dtype;
  }
  StepOptions so;
  so.grad_scale = l.grad_scale;
  STRATA_RETURN_IF_ERROR(opt.StepAt(l.hp, l.step, t, so));
  if (l.param_copy != nullptr && !fused) {
    std::memcpy(l.param_copy, l.params, l.numel * sizeof(float));
  }
  return Status::Ok();
}

Status Step(const Stream& stream, const OptimizerStepLaunch& launch,
            const OptimizerKernelArgs& /*args: cpu_adam derives the same from launch*/) {
  auto p = std::make_unique<OptimizerStepLaunch>(launch);
  return stream.LaunchHostFunc([p = std::move(p)]() -> Status { return RunStep(*p); });
}

struct NormArgs {
  double* partials;
  const float* src;
  size_t numel;
};

Status SquaredNormPartials(const Stream& stream, double* partials, const float* src, size_t numel) {
  auto p = std::make_unique<NormArgs>(NormArgs{partials, src, numel});
  return stream.LaunchHostFunc([p = std::move(p)]() -> Status {
    const NormArgs& a = *p;
    // Chunks are independent, so the parallel loop changes no bit.
    ParallelSquaredNormChunkSums(a.src, a.numel, a.partials);
    return Status::Ok();
  });
}

}  // namespace

const OptimizerKernelTable& HostOptimizerKernels() {
  static const OptimizerKernelTable table{"host (cpu_adam)", &Step, &SquaredNormPartials};
  return table;
}

}  // namespace strata::internal
