// InfInjector: module hooks that, while armed, put +Inf in the first element of a parameter's
// gradient slot (`target`, or the hooked Linear's weight if null) before its module's backward, so
// the backward adds into it and the step sees an fp16 overflow. A fresh slot
// (nn/tensor/parameter.h: Note [Fresh gradient slots]) is zeroed first, as any writer into a slot
// before the module's own backward must.
#pragma once

#include <limits>

#include "nn/modules/layers/linear.h"
#include "nn/modules/layers/module.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/kernels.h"

namespace strata::testing {

class InfInjector final : public nn::ModuleHooks {
 public:
  explicit InfInjector(nn::Parameter* target) : target_(target) {}
  bool armed = false;
  Status OnHook(nn::HookPoint point, nn::Module& m, const nn::RunContext& ctx) override {
    if (point != nn::HookPoint::kPreBackward || !armed) return Status::Ok();
    nn::Parameter& p = target_ != nullptr ? *target_ : static_cast<nn::Linear&>(m).weight();
    STRATA_RETURN_IF_ERROR(nn::ZeroGradIfFresh(ctx.stream, p));
    return LaunchFill(ctx.stream, p.grad(), DType::kFloat32, std::numeric_limits<float>::infinity(),
                      1);
  }

 private:
  nn::Parameter* target_;
};

}  // namespace strata::testing
