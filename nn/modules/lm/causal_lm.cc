#include "nn/modules/lm/causal_lm.h"

namespace strata::nn {

Result<float> CausalLM::ReadLoss(const RunContext& ctx) const {
  const float* loss = loss_device();
  if (loss == nullptr) return FailedPreconditionError("ReadLoss: no forward with labels has run");
  float value = 0;
  STRATA_RETURN_IF_ERROR(
      ctx.stream.CopyAsync(&value, loss, sizeof(value), CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(ctx.stream.Synchronize());
  return value;
}

}  // namespace strata::nn
